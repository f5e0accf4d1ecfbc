"""Suite loading: valid suites resolve; every malformed field is named in the error."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.suite import load_suite
from harness.probes import PROBES, known_probes
from harness.revisions import Revision
from harness.jobs import RunRequest
from harness.pipeline.plan import plan

ROOT = Path(__file__).resolve().parents[1]

MINIMAL = """
name = "t"
[models]
refserver = "{model}"
[[config]]
name = "a"
probes = ["kl"]
"""


def write(tmp_path: Path, text: str) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"vocab_size": 100}')
    path = tmp_path / "suite.toml"
    path.write_text(text.replace("{model}", str(model)))
    return path


def test_default_suite_loads_and_resolves_per_target():
    suite = load_suite(ROOT / "suites" / "default.toml", known_probes())
    assert suite.name == "default"
    cfg = suite.server_config(suite.config("deterministic"), "sglang")
    assert "--load-format" in cfg.args and "--random-seed" in cfg.args
    assert cfg.features.deterministic
    assert len(cfg.fingerprint) == 16


def test_fingerprint_changes_with_args(tmp_path):
    suite = load_suite(write(tmp_path, MINIMAL), known_probes())
    a = suite.server_config(suite.configs[0], "refserver")
    b = a.__class__(**{**a.__dict__, "args": ("--x",)})
    assert a.fingerprint != b.fingerprint


@pytest.mark.parametrize("extra, message", [
    ("bogus = 1\n", "unknown key 'bogus'"),
    ("[workload]\nprompt_len = [10, 5]\n", "prompt_len"),
    ("[workload]\nkind = 'web'\n", "[workload].kind"),
    ("[probe.nope]\nx = 1\n", "[probe.nope]: unknown probe"),
    ("[[config]]\nname = 'a'\nprobes = ['kl']\n", "duplicate [[config]] names: a"),
    ("[[config]]\nname = 'b'\nprobes = ['klx']\n", "unknown probe 'klx'"),
    ("[[config]]\nname = 'b'\nprobes = ['kl']\nmamba_pool = 'huge'\n", "mamba_pool"),
    ("[[config]]\nname = 'b'\nprobes = ['kl']\nswa_ratio = 1.5\n", "swa_ratio: 1.5 is out of range"),
    ("[[config]]\nname = 'b'\nprobes = ['kl']\nspeculative = {algorithm = 'MAGIC'}\n", "speculative.algorithm"),
    ("[[config]]\nname = 'b'\nprobes = ['kl']\ncolour = 'red'\n", "unknown key 'colour'"),
    ("[[config]]\nname = 'b'\nprobes = ['kl']\nretract_interval = 0\n", "retract_interval: 0 is out of range"),
    ("[[config]]\nname = 'b'\nprobes = ['kl']\nmin_retractions = -1\n", "min_retractions: -1 is out of range"),
])
def test_bad_fields_are_named(tmp_path, extra, message):
    path = write(tmp_path, MINIMAL + extra)
    with pytest.raises(UsageError) as err:
        load_suite(path, known_probes())
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_missing_model_dir_is_named(tmp_path):
    path = tmp_path / "suite.toml"
    path.write_text(MINIMAL.replace("{model}", str(tmp_path / "nowhere")))
    with pytest.raises(UsageError, match="has no config.json"):
        load_suite(path, known_probes())


def test_invalid_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_suite(bad)
    with pytest.raises(UsageError, match="suite file not found"):
        load_suite(tmp_path / "absent.toml")


def test_probe_params_override_workload(tmp_path):
    suite = load_suite(write(tmp_path, MINIMAL + "[probe.kl]\nprompts = 6\noutput_len = 7\n"), known_probes())
    spec = suite.workload.with_overrides(suite.probe_spec("kl").params)
    assert (spec.prompts, spec.output_len) == (6, 7)


TWO_PROBES = MINIMAL + '[[config]]\nname = "b"\nprobes = ["throughput"]\n'


def test_suite_holds_validated_params_for_every_probe_it_names(tmp_path):
    loaded = load_suite(write(tmp_path, TWO_PROBES + "[probe.kl]\nthreshold = 1e-9\n"), known_probes())
    assert set(loaded.probe_params) == {"kl", "throughput"}
    assert loaded.probe_params["kl"]["threshold"] == 1e-9
    assert loaded.probe_params["throughput"]["concurrency"] == [1, 4, 8]


@pytest.mark.parametrize("extra, message", [
    ("[probe.kl]\nthresold = 1e-9\n", r"\[probe\.kl\]: unknown key 'thresold'; did you mean 'threshold'"),
    ("[probe.throughput]\nconcurrency = []\n", r"\[probe\.throughput\]\.concurrency: must list at least one"),
    ("[workload]\nprompts = 0\n", r"\[workload\]\.prompts: 0 is out of range"),
    ("[workload]\npromts = 3\n", r"\[workload\]: unknown key 'promts'; did you mean 'prompts'"),
    ("[probe.kl]\nvocab = 3\nlow_token = 3\n", r"\[workload\] with \[probe\.kl\]: vocab must exceed low_token"),
])
def test_probe_and_workload_tables_are_checked_with_file_and_key(tmp_path, extra, message):
    path = write(tmp_path, TWO_PROBES + extra)
    with pytest.raises(UsageError, match=message) as err:
        load_suite(path, known_probes())
    assert str(path) in str(err.value)


def test_every_committed_suite_passes_the_strict_schema():
    files = sorted((ROOT / "suites").rglob("*.toml"))
    assert len(files) >= 12
    for path in files:
        for kind, table in tomllib.loads(path.read_text()).get("probe", {}).items():
            PROBES[kind].validate(table, f"{path}: [probe.{kind}]")


def test_a_configuration_named_twice_runs_once(tmp_path):
    suite = load_suite(ROOT / "suites" / "default.toml", known_probes())
    name = suite.configs[0].name
    req = RunRequest(suite_path=suite.path, target="refserver", base=Revision.installed(),
                     candidate=Revision.installed(), out_dir=tmp_path, store_root=tmp_path,
                     only_configs=(name, name))
    assert [cp.spec.name for cp in plan(suite, req)] == [name]


GRAPHS = """
name = "t"
graph_modes = {modes}
[models]
refserver = "{model}"
[server]
args = {args}
[[config]]
name = "a"
probes = ["kl"]
[[config]]
name = "b"
probes = ["kl"]
cuda_graph = false
"""


def test_graph_modes_expand_configs_and_fingerprints(tmp_path):
    suite = load_suite(write(tmp_path, GRAPHS.format(modes='["off", "on"]', args="[]", model="{model}")),
                       known_probes())
    assert [c.name for c in suite.configs] == ["a-graphs-off", "a-graphs-on", "b"]
    assert [c.features.cuda_graph for c in suite.configs] == [False, True, False]
    prints = {suite.server_config(c, "refserver").fingerprint for c in suite.configs}
    assert len(prints) == 2  # a-graphs-off and b mean the same server


def test_cuda_graph_unset_keeps_old_fingerprint(tmp_path):
    from harness.configs import Features, _features_dict

    assert "cuda_graph" not in _features_dict(Features())
    assert _features_dict(Features(cuda_graph=True))["cuda_graph"] is True


@pytest.mark.parametrize("modes, args, message", [
    ('["off", "off"]', "[]", "graph_modes must be"),
    ('["sometimes"]', "[]", "graph_modes must be"),
    ('"on"', "[]", "graph_modes must be"),
    ('["on"]', '["--disable-cuda-graph"]', "--disable-cuda-graph contradicts cuda_graph"),
])
def test_bad_graph_modes(tmp_path, modes, args, message):
    with pytest.raises(UsageError, match=message):
        load_suite(write(tmp_path, GRAPHS.format(modes=modes, args=args, model="{model}")), known_probes())


def test_cuda_graph_must_be_bool(tmp_path):
    text = MINIMAL + "cuda_graph = 'yes'\n"
    with pytest.raises(UsageError, match="cuda_graph: expected true or false, got a string .yes."):
        load_suite(write(tmp_path, text), known_probes())


CHUNKED = """
name = "t"
[models]
sglang = "{model}"
[server.target_args]
sglang = ["--attention-backend", "%s"]
[[config]]
name = "a"
probes = ["kl"]
deterministic = %s
target_args = { sglang = ["--chunked-prefill-size", "%s"] }
%s
"""


@pytest.mark.parametrize("backend, deterministic, chunk, env, refused", [
    ("triton", "true", "128", "", "below the 4096-token alignment"),
    ("flashinfer", "true", "2048", "", "SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE"),
    ("triton", "true", "128", 'env = { SGLANG_TRITON_PREFILL_TRUNCATION_ALIGN_SIZE = "256" }', "below the 256-token"),
    ("triton", "true", "128", 'env = { SGLANG_TRITON_PREFILL_TRUNCATION_ALIGN_SIZE = "128" }', None),
    ("triton", "true", "4096", "", None),
    ("triton", "false", "128", "", None),  # off deterministic mode chunks are cut anywhere
    ("fa3", "true", "128", "", None),  # no alignment for it in SGLang's table
])
def test_a_deterministic_chunk_below_sglangs_alignment_is_refused_with_the_switch_to_set(
        tmp_path, backend, deterministic, chunk, env, refused):
    """SGLang 0.5.16 on the H200: deterministic Triton with --chunked-prefill-size 128 never
    prefilled a prompt longer than 128 tokens (issue 36344): refused at load, not two timeouts."""
    path = write(tmp_path, CHUNKED % (backend, deterministic, chunk, env))
    if refused is None:
        assert load_suite(path, known_probes()).configs[0].name == "a"
        return
    with pytest.raises(UsageError, match=refused) as err:
        load_suite(path, known_probes())
    assert "[[config]] 'a'" in str(err.value) and "issue 36344" in str(err.value)


def test_a_run_whose_own_server_args_shrink_the_chunk_below_the_alignment_is_refused_before_a_launch(tmp_path):
    """--server-arg / the matrix entry's args and env are the run's, not the suite's: the plan
    checks the configuration with them (a suite that passes alone may not with them)."""
    suite = load_suite(write(tmp_path, CHUNKED % ("triton", "true", "4096", "")), known_probes())

    def request(args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> RunRequest:
        return RunRequest(suite_path=suite.path, target="sglang", base=Revision.installed(),
                          candidate=Revision.installed(), out_dir=tmp_path, store_root=tmp_path,
                          extra_args=args, extra_env=env or {})

    assert [cp.spec.name for cp in plan(suite, request())] == ["a"]
    with pytest.raises(UsageError, match="'a' with this run's server args and environment: --chunked-prefill-size 256"):
        plan(suite, request(("--chunked-prefill-size", "256")))
    with pytest.raises(UsageError, match="below the 8192-token alignment"):
        plan(suite, request(env={"SGLANG_TRITON_PREFILL_TRUNCATION_ALIGN_SIZE": "8192"}))
    aligned = request(("--chunked-prefill-size", "256"), {"SGLANG_TRITON_PREFILL_TRUNCATION_ALIGN_SIZE": "256"})
    assert [cp.server.env["SGLANG_TRITON_PREFILL_TRUNCATION_ALIGN_SIZE"] for cp in plan(suite, aligned)] == ["256"]


def test_every_committed_suite_passes_the_design_check(monkeypatch):
    # The GPU suites name models that exist only on the GPU machines: the design check needs
    # their tables and configurations, not the weights.
    import harness.suite

    monkeypatch.setattr(harness.suite, "_resolve_model", lambda suite, rel, field: Path(rel))
    files = sorted((ROOT / "suites").rglob("*.toml"))
    for path in files:
        load_suite(path, known_probes())  # raises UsageError naming the key when it cannot decide


def test_a_suite_whose_rounds_cannot_reach_alpha_is_refused_with_the_smallest_count(tmp_path):
    from conftest import detcheck, refserver_suite

    suite = refserver_suite(tmp_path / "five.toml", ["throughput"],
                            "[probe.throughput]\nconcurrency = [1, 4]\nrepeats = 5\nmax_looks = 1\n", deterministic=False)
    with pytest.raises(UsageError) as err:
        load_suite(suite, known_probes())
    assert "[probe.throughput].repeats: 5 gives tok_s_c4 5 pairs" in str(err.value)
    assert "smallest two-sided p is 0.0625" in str(err.value) and "set repeats >= 6" in str(err.value)
    # the CLI refuses it before any launch: exit 2
    proc = detcheck("run", "--suite", str(suite), "--out", str(tmp_path / "out"), "--no-progress")
    assert proc.returncode == 2 and "set repeats >= 6" in proc.stderr, proc.stderr
    # a stricter alpha asks for more; six rounds at 0.05 load
    strict = refserver_suite(tmp_path / "strict.toml", ["throughput"],
                             "[probe.throughput]\nrepeats = 6\nalpha = 0.01\nmax_looks = 1\n", deterministic=False)
    with pytest.raises(UsageError, match="set repeats >= 8"):
        load_suite(strict, known_probes())
    load_suite(refserver_suite(tmp_path / "six.toml", ["throughput"], "[probe.throughput]\nrepeats = 6\nmax_looks = 1\n",
                               deterministic=False), known_probes())
    # sequential (three looks by default): the last look, 3 x 2 rounds at alpha 0.05 / 4, cannot reach it
    # (2/2^6 = 0.031); three rounds a look (9 by the last) can
    with pytest.raises(UsageError, match=r"repeats: 2 gives tok_s_c8 6 pairs by look 3.*share at the last of 3 looks.*set repeats >= 3"):
        load_suite(refserver_suite(tmp_path / "two.toml", ["throughput"], "[probe.throughput]\nrepeats = 2\n",
                                   deterministic=False), known_probes())
    load_suite(refserver_suite(tmp_path / "three.toml", ["throughput"], "[probe.throughput]\nrepeats = 3\n",
                               deterministic=False), known_probes())


def test_the_design_check_knows_which_metrics_are_noisy_on_which_configuration(tmp_path):
    from conftest import refserver_suite

    # three prompts: exact k3 under deterministic inference needs no count at all
    load_suite(refserver_suite(tmp_path / "det.toml", ["kl"], prompts=3), known_probes())
    # a non-deterministic kl is judged on per-prompt k3 pairs: three cannot reach 0.05
    with pytest.raises(UsageError, match=r"\[probe.kl\].prompts: 3 gives k3 3 pairs.*set prompts >= 6"):
        load_suite(refserver_suite(tmp_path / "noisy.toml", ["kl"], "[probe.kl]\nmax_looks = 1\n", prompts=3,
                                   deterministic=False), known_probes())
    # accept_length: two turns per prompt per round
    with pytest.raises(UsageError, match=r"repeats: 1 gives accept_length 4 pairs.*set repeats >= 2"):
        load_suite(refserver_suite(tmp_path / "acc.toml", ["accept_length"], "[probe.accept_length]\nmax_looks = 1\n",
                                   prompts=2, deterministic=False), known_probes())
    # a cache probe's k3 counts hits, which no plan knows: the check reads every prompt as a hit
    with pytest.raises(UsageError, match=r"prompts: 3 gives k3 at most 3 hits, whose smallest"):
        load_suite(refserver_suite(tmp_path / "hits.toml", ["decode_cache_hit"],
                                   "[probe.decode_cache_hit]\nmax_looks = 1\n", prompts=3, deterministic=False),
                   known_probes())


def test_revision_kl_off_deterministic_mode_needs_the_prompts_its_two_noisy_metrics_can_decide_on(tmp_path):
    from conftest import refserver_suite

    # exact under deterministic inference: any count decides
    load_suite(refserver_suite(tmp_path / "det.toml", ["revision_kl"], prompts=3), known_probes())
    # otherwise KL, top-1 agreement and the greedy decode's two, paired by prompt, share alpha
    # 0.05: in one look 8 pairs (2/2^8 < 0.0125)
    one_look = "[probe.revision_kl]\nmax_looks = 1\n"
    with pytest.raises(UsageError, match=r"\[probe.revision_kl\].prompts: 3 gives kl 3 pairs.*"
                                         r"alpha 0.05: over 4 deciding noisy metrics.*set prompts >= 8"):
        load_suite(refserver_suite(tmp_path / "noisy.toml", ["revision_kl"], one_look, prompts=3, deterministic=False),
                   known_probes())
    load_suite(refserver_suite(tmp_path / "eight.toml", ["revision_kl"], one_look, prompts=8, deterministic=False),
               known_probes())
    # with three looks the last one (alpha/4 over 4 metrics) measures 4 times the prompts: 10 pairs at
    # least, so 3 prompts (12 by look 3) load and 2 (8) do not
    with pytest.raises(UsageError, match=r"prompts: 2 gives kl 8 pairs by look 3.*share at the last of 3 looks, over 4 deciding.*set prompts >= 3"):
        load_suite(refserver_suite(tmp_path / "two.toml", ["revision_kl"], prompts=2, deterministic=False),
                   known_probes())
    load_suite(refserver_suite(tmp_path / "three.toml", ["revision_kl"], prompts=3, deterministic=False),
               known_probes())


@pytest.mark.parametrize("probe, table, deterministic, message", [
    ("kl", 'verdict_metrics = ["k3x"]', True, r"verdict_metrics: 'k3x' is not a metric of kl \(its metrics: k3, topk_kl, first_divergent, topk_first_divergent\)"),
    ("swa_peak", 'verdict_metrics = ["peak", "swa_plateau"]', True, r"'peak' is not a metric of swa_peak"),
    ("revision_kl", 'verdict_metrics = ["kl"]', True,
     r"verdict_metrics: kl is not reported on a deterministic configuration, whose metrics are scored_logprobs"),
    ("revision_kl", 'verdict_metrics = ["greedy_ids", "scored_topk"]', False,
     r"are not reported on a non-deterministic configuration, whose metrics are kl, top1_agree"),
])
def test_verdict_metrics_that_could_never_decide_are_refused(tmp_path, probe, table, deterministic, message):
    """A verdict_metrics naming no metric the configuration reports decides nothing: a run would
    read error (or, before, *unknown* and exit 0) on every change; refused when the suite loads."""
    from conftest import refserver_suite

    suite = refserver_suite(tmp_path / "s.toml", [probe], f"[probe.{probe}]\n{table}\n", prompts=8,
                            deterministic=deterministic)
    with pytest.raises(UsageError, match=message):
        load_suite(suite, known_probes())
    # the metrics of the other mode are known names: narrowing to one reported here loads
    fine = "scored_logprobs" if deterministic else "kl"
    if probe == "revision_kl":
        load_suite(refserver_suite(tmp_path / "ok.toml", [probe], f'[probe.{probe}]\nverdict_metrics = ["{fine}", "top1_agree"]\n',
                                   prompts=8, deterministic=deterministic), known_probes())


def test_pressure_keys_reach_the_server_as_sglangs_switches(tmp_path):
    suite = load_suite(write(tmp_path, MINIMAL + "[[config]]\nname = 'p'\nprobes = ['kl']\nretract_interval = 7\n"
                                            "max_total_tokens = 2048\nmin_retractions = 12\n"), known_probes())
    plain, pressed = (suite.server_config(c, "refserver") for c in suite.configs)
    # SGLang's debug invariants too, under pressure (issue 48)
    assert pressed.env == {"SGLANG_ENABLE_TREE_CACHE_SANITY_CHECK": "1", "SGLANG_CHECK_KV_PAGE_INVARIANTS": "1",
                           "SGLANG_DEBUG_POISON_POOL": "1", "SGLANG_TEST_RETRACT": "1",
                           "SGLANG_TEST_RETRACT_INTERVAL": "7"} and plain.env == {}
    assert (pressed.features.max_total_tokens, pressed.features.min_retractions) == (2048, 12)
    assert plain.fingerprint != pressed.fingerprint
