"""The registry: every module of harness.probes registers itself; a probe from a module of its
own (one file, outside the package) registers the same way and runs end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, refserver_suite
from harness.errors import UsageError
from harness.probes import PROBES, known_probes, load_entry_points, register, shipped_probes
from harness.probes.base import ProbeKind


def _package_probes() -> dict[str, ProbeKind]:
    """Every ProbeKind a module of harness/probes/ holds at module level, by name."""
    import importlib
    import pkgutil

    import harness.probes

    found = {}
    for module in pkgutil.iter_modules(harness.probes.__path__):
        for value in vars(importlib.import_module(f"harness.probes.{module.name}")).values():
            if isinstance(value, ProbeKind):
                found[value.name] = value
    return found


def test_every_probe_module_registers_its_probes():
    package = _package_probes()
    assert package and all(PROBES[name] is kind for name, kind in package.items())
    assert dict(shipped_probes()) == package
    assert set(known_probes()) == set(PROBES)
    with pytest.raises(TypeError):
        known_probes()["x"] = PROBES["kl"]  # read-only view


SHIPPED = tuple(shipped_probes())


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_probe_plans_its_metrics_and_its_default_deciding_ones_exist(name):
    """The design check reads `planned`: a probe without it has its noisy metrics and its
    verdict_metrics unchecked (revision_kl's KL off deterministic mode could not decide on the
    swa suites' 2 prompts). A default verdict_metrics names only metrics the probe reports."""
    from harness.suite import WorkloadSpec

    kind = PROBES[name]
    assert kind.planned is not None
    params, spec = kind.defaults(), WorkloadSpec(prompts=8)
    reported = {m.name for det in (True, False) for m in kind.planned(params, spec, det)}
    assert reported and set(params["verdict_metrics"] or ()) <= reported


def test_a_second_probe_of_the_same_name_is_refused():
    clash = ProbeKind("kl", lambda ctx: None, "another kl")
    with pytest.raises(UsageError, match="two probes are named 'kl'"):
        register(clash)
    assert register(PROBES["kl"]) is PROBES["kl"]  # registering the same one again is harmless


TOY = '''
"""toy: completion tokens per prompt, with one parameter of each role."""

from harness.params import Param, ParamRole
from harness.probes import register
from harness.probes.base import ProbeKind, descriptive, metric
from harness.probes.shared_params import JUDGING, WORKLOAD
from harness.results import Metric, ProbeOutput
from harness.verdict_stats import Kind


def run(ctx):
    gens = ctx.client.generate([list(p) for p in ctx.workload.prompts],
                               max_new_tokens=ctx.param("tokens"))
    counts = tuple(float(g.completion_tokens) for g in gens)
    return ProbeOutput(samples=tuple({"completion_tokens": c} for c in counts),
                       metrics=(Metric("completion_tokens", Kind.EXACT, counts),),
                       facts={"requests": len(gens)})


PROBE = register(ProbeKind("toy", run, "completion tokens per prompt", params=(
    *WORKLOAD,
    Param("tokens", int, 3, "tokens per request", ParamRole.MEASURED, low=1, high=64),
    *JUDGING,
), describe=lambda facts, primary: f"{facts['requests']} requests",
   figures=(metric("completion_tokens"), *descriptive("the workload's size", "requests"))))
'''


def detcheck_with_toy(module_dir, *args: str) -> subprocess.CompletedProcess:
    """`detcheck` as a user's own entry point would run it: import the probe's module, then the CLI."""
    code = "import sys, toy_probe; from harness.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "PYTHONPATH": f"{module_dir}:{ROOT}"})


@pytest.mark.slow
def test_a_toy_probe_in_a_module_of_its_own_runs_end_to_end(tmp_path):
    (tmp_path / "toy_probe.py").write_text(TOY)
    suite = refserver_suite(tmp_path / "toy.toml", ["toy"], "[probe.toy]\ntokens = 5\n", config="plain",
                            deterministic=False, prompt_len=(8, 8))
    out = tmp_path / "run"
    proc = detcheck_with_toy(tmp_path, "run", "--suite", str(suite), "--out", str(out),
                             "--no-progress", "--format", "md")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert [c["verdict"] for c in result["comparisons"]] == ["same"]
    cell = next(c for c in result["cells"] if c["role"] == "base")
    assert cell["status"] == "ok" and [s["completion_tokens"] for s in cell["samples"]] == [5, 5]
    assert "| plain | `toy` | 2 requests | 2 requests | ✅ same |" in proc.stdout

    suite.write_text(suite.read_text().replace("tokens = 5", "tokens = 500"))
    bad = detcheck_with_toy(tmp_path, "run", "--suite", str(suite), "--out", str(tmp_path / "bad-run"))
    assert bad.returncode == 2 and "[probe.toy].tokens: 500 is out of range [1, 64]" in bad.stderr


# Every figure each shipped probe records, by role: a figure a probe starts to write appears here
# (and in the probe's ProbeKind.figures) or its cell fails (pipeline/outcome.probe_outcome), so nothing is
# recorded that no verdict reads without saying why.
DECLARED = {
    'accept_length': {
        'metric': ['accept_length', 'cached_tokens', 'draft_position_accept', 'request_tokens'],
        'summary': ['aggregate_accept_length', 'completion_tokens', 'draft_position_accept', 'requests_without_verify', 'server_avg_accept_length', 'turn1_median', 'turn2_hit_fraction', 'turn2_median', 'verify_calls'],
        'parameter': ['min_hit_fraction'],
        'input': ['requests'],
    },
    'decode_cache_hit': {
        'metric': ['aba_cached_tokens', 'aba_first_divergent', 'cached_tokens', 'first_divergent', 'hit_fraction', 'k3'],
        'summary': ['frac_over_tau', 'hit_fraction', 'hit_lengths', 'k3_max', 'k3_mean', 'k3_median', 'k3_p99', 'passes_threshold', 'prompts_diverged'],
        'locator': ['aba', 'first_divergent', 'first_divergent_prompt'],
        'parameter': ['min_hit_fraction', 'tau', 'threshold'],
        'input': ['cache_policy', 'prompts', 'tokens', 'vacuous'],
    },
    'determinism': {
        'metric': ['ids_departure', 'logprob_departure', 'unique_outputs'],
        'summary': ['unique_outputs'],
        'locator': ['first_difference', 'first_differing_batch_size'],
        'parameter': ['batch_sizes', 'compares'],
    },
    'jitter': {
        'metric': ['jitter_departure'],
        'locator': ['first_difference'],
        'parameter': ['max_delay_s', 'rounds'],
        'input': ['prompts', 'schedule'],
    },
    'kl': {
        'metric': ['first_divergent', 'k3', 'topk_first_divergent', 'topk_kl'],
        'summary': ['frac_over_tau', 'k3_max', 'k3_mean', 'k3_median', 'k3_p99', 'passes_threshold', 'prompts_diverged', 'top1_agree', 'topk_frac_over_tau', 'topk_kl_max', 'topk_kl_mean', 'topk_kl_p99'],
        'locator': ['first_divergent', 'first_divergent_prompt'],
        'parameter': ['tau', 'threshold', 'top_k'],
        'input': ['prompts', 'tokens'],
        'descriptive': ['degenerate_prompts'],
    },
    'prefill_cache_hit': {
        'metric': ['aba_cached_tokens', 'aba_first_divergent', 'cached_tokens', 'first_divergent', 'hit_fraction', 'k3'],
        'summary': ['frac_over_tau', 'hit_fraction', 'hit_lengths', 'k3_max', 'k3_mean', 'k3_median', 'k3_p99', 'passes_threshold', 'prompts_diverged'],
        'locator': ['aba', 'first_divergent', 'first_divergent_prompt'],
        'parameter': ['min_hit_fraction', 'tau', 'threshold'],
        'input': ['cache_policy', 'prompts', 'tokens', 'vacuous'],
    },
    'reference': {
        'metric': ['cached_tokens', 'diverging', 'revision_diverging'],
        'summary': ['cached_tokens', 'degenerate_prompts', 'diverging_phases', 'diverging_requests'],
        'locator': ['first_divergence'],
        'parameter': ['deterministic', 'reference', 'top_k'],
        'input': ['not_comparable', 'phases', 'prompts', 'requests'],
    },
    'revision_kl': {
        'metric': ['greedy_ids', 'greedy_k3', 'greedy_logprobs', 'greedy_match', 'greedy_topk', 'kl', 'scored_logprobs', 'scored_topk', 'top1_agree'],
        'summary': ['base_self_kl_mean', 'degenerate_prompts', 'greedy_identical', 'k3_frac_over_tau', 'k3_max', 'k3_mean', 'k3_p99', 'kl_frac_over_tau', 'kl_infinite_prompts', 'kl_max', 'kl_mean', 'kl_p99', 'nll_mean', 'prompts_diverged', 'scored_nll', 'top1_agree'],
        'locator': ['decode_first_divergent', 'first_divergent', 'greedy_first_diff'],
        'parameter': ['continuation_len', 'deterministic', 'scoring_passes', 'tau', 'top_k'],
        'input': ['not_comparable', 'prompts', 'scored_tokens'],
    },
    'seeded_sampling': {
        'metric': ['batch_departure', 'hit_cached_tokens', 'hit_departure', 'n_clones', 'sampled_ids', 'sampled_logprobs', 'seed_clones'],
        'locator': ['first_difference'],
        'parameter': ['n', 'seeds', 'temperature'],
        'input': ['prompts'],
    },
    'swa_peak': {
        'metric': ['retractions', 'swa_peak', 'swa_plateau'],
        'summary': ['gauge_max', 'gauge_within_log', 'growth_slope', 'retractions', 'swa_peak', 'swa_peak_usage', 'swa_plateau'],
        'input': ['requests'],
        'descriptive': ['aborted', 'decode_lines', 'generated_tokens'],
    },
    'throughput': {
        'metric': ['req_tok_s_c*', 'tok_s_c*'],
        'summary': ['tok_s_c*_median'],
        'parameter': ['concurrency', 'repeats', 'window_s'],
        'descriptive': ['requests_cut', 'requests_sent', 'retraction_events', 'retractions', 'swa_peak_usage_c*', 'swa_tokens_at_retraction'],
    },
}


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_every_probe_declares_its_figures_and_each_belongs_to_a_metric(name):
    from harness.suite import WorkloadSpec
    from harness.probes.base import FigureRole

    kind = PROBES[name]
    declared = {role.value: sorted(f.name for f in kind.figures if f.role == role) for role in FigureRole}
    assert {r: v for r, v in declared.items() if v} == DECLARED[name]
    metrics = [f for f in kind.figures if f.role == FigureRole.METRIC]
    for figure in kind.figures:  # a summary or locator names a metric of the probe, which decides it
        if figure.role in (FigureRole.SUMMARY, FigureRole.LOCATOR):
            assert any(m.name == figure.of for m in metrics), figure
    params, spec = kind.defaults(), WorkloadSpec(prompts=8)
    for det in (True, False):  # every metric the probe plans is declared one
        for planned in kind.planned(params, spec, det):
            assert any(m.names(planned.name) for m in metrics), (planned.name, det)


def test_a_figure_nobody_declared_fails_its_cell_and_its_comparison():
    from harness.compare import compare_cells
    from harness.results import CellResult, Metric, ProbeOutput, RevisionInfo, Role, Status
    from harness.verdict_stats import Kind

    kl = PROBES["kl"]
    assert kl.undeclared(ProbeOutput((), (Metric("k3", Kind.EXACT, (0.0,)),), {"k3_mean": 0.0})) == []
    odd = ProbeOutput((), (Metric("k3", Kind.EXACT, (0.0,)), Metric("reuse", Kind.EXACT, (1.0,))),
                      {"k3_mean": 0.0, "hit_lengths": [3]})
    assert kl.undeclared(odd) == ["metric reuse", "fact hit_lengths"]
    # a fact cannot pass for a metric: it is not compared
    assert kl.undeclared(ProbeOutput((), (Metric("k3_mean", Kind.EXACT, (0.0,)),), {})) == ["metric k3_mean"]
    rev = RevisionInfo("HEAD", "a" * 40)
    cells = [CellResult("c", "kl", role, rev, Status.OK, "f", "w", metrics=odd.metrics, facts=odd.facts)
             for role in (Role.BASE, Role.CANDIDATE)]
    comp = compare_cells("c", "kl", *cells, kl.defaults())
    assert comp.verdict.value == "error" and "undeclared figures of kl: metric reuse" in comp.note, comp.note



def test_the_pipeline_declares_what_it_adds_to_every_cell():
    """The facts the pipeline writes into every probe's cells (round placement, looks, the path
    proof of harness/path_proof.py, the foreign GPU processes of harness/runner.py) are declared
    once, as input or descriptive: none decides by itself (a path proof's `vacuous` and the foreign
    processes are read by compare.py, as a probe's own vacuity); the path's exact counters are
    metrics under deterministic mode (`path_*`, issue 44)."""
    from harness.probes.base import PIPELINE_FIGURES

    assert sorted((f.name, f.role.value) for f in PIPELINE_FIGURES) == [
        ("first_side", "input"), ("path", "descriptive"), ("path_cached_tokens", "metric"),
        ("path_decoded_tokens", "metric"), ("path_verify_calls", "metric"), ("placement", "input"),
        ("placement_seed", "input"), ("runner_foreign", "input"), ("sequential", "input")]


def test_the_golden_declarations_cover_every_shipped_probe():
    """DECLARED is reviewed by hand: a shipped probe is listed there (a new one too)."""
    assert set(DECLARED) == set(SHIPPED)


def test_the_probe_docs_table_is_the_registry():
    """docs/PROBES.md's table is generated from each probe's declarations (`detcheck probes`), and
    the GUIDE's probe table names exactly the shipped probes."""
    import re

    from harness.commands.probes import docs_table

    probes_md = (ROOT / "docs" / "PROBES.md").read_text()
    assert "\n".join(docs_table(shipped_probes())) in probes_md
    guide = (ROOT / "docs" / "GUIDE.md").read_text()
    section = guide[guide.index("## Probes\n"):]
    table = section[:section.index("\n\n", section.index("| probe |"))]
    assert re.findall(r"^\| `(\w+)` \|", table, re.M) and \
        set(re.findall(r"^\| `(\w+)` \|", table, re.M)) == set(SHIPPED)


def test_detcheck_probes_lists_each_probe_its_kind_parameters_and_doc(capsys):
    from harness.cli import main

    assert main(["probes"]) == 0
    out = capsys.readouterr().out
    for name, kind in shipped_probes().items():
        assert f"{name}  (" in out and f"  {kind.summary}\n" in out
    assert "kl  (exact under deterministic mode, noisy otherwise)" in out
    assert "    top_k=8  measured: " in out and "throughput  (noisy)" in out


EXTERNAL = ROOT / "tests" / "data" / "external_probe"


def test_an_entry_point_that_fails_or_names_no_probe_is_an_error_naming_it():
    from importlib.metadata import EntryPoint

    missing = EntryPoint("gone", "no_such_probe_module:PROBE", "detcheck.probes")
    with pytest.raises(UsageError, match="probe entry point gone = 'no_such_probe_module:PROBE' "
                                         r"\(group detcheck.probes\) failed to import: ModuleNotFoundError"):
        load_entry_points([missing])
    other = EntryPoint("figures", "harness.probes.kl:FIGURES", "detcheck.probes")
    with pytest.raises(UsageError, match="probe entry point figures = .* names a tuple, not a ProbeKind"):
        load_entry_points([other])


def detcheck_on_path(plug_in_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """Plain `detcheck` with `plug_in_dir` (a module and its distribution's dist-info, as a
    package's `[project.entry-points."detcheck.probes"]` installs them) on the path."""
    code = "import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "PYTHONPATH": f"{plug_in_dir}:{ROOT}"})


@pytest.mark.slow
def test_a_probe_outside_the_tree_found_by_its_entry_point_runs_end_to_end(tmp_path):
    """tests/data/external_probe: plain `detcheck` finds its probe by the entry point."""
    suite = refserver_suite(tmp_path / "ext.toml", ["toy_external"], "[probe.toy_external]\ntokens = 5\n",
                            config="plain", deterministic=False, prompt_len=(8, 8))
    out = tmp_path / "run"
    proc = detcheck_on_path(EXTERNAL, "run", "--suite", str(suite), "--out", str(out), "--no-progress",
                            "--format", "md")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert [c["verdict"] for c in result["comparisons"]] == ["same"]
    assert "| plain | `toy_external` | 2 requests | 2 requests | ✅ same |" in proc.stdout
    listed = detcheck_on_path(EXTERNAL, "probes")
    assert "toy_external  (exact)" in listed.stdout and "    tokens=3  measured: tokens per request" in listed.stdout


BROKEN_PLUG_INS = {
    "raising": "detcheck: error: probe entry point raising = 'detcheck_raising_probe:PROBE' of "
               "detcheck-raising-probe 1.0 (group detcheck.probes) failed to import: RuntimeError: "
               "this plug-in needs a GPU library that is not installed\n",
    "clashing": "detcheck: error: probe entry point clashing = 'detcheck_clashing_probe:PROBE' of "
                "detcheck-clashing-probe 2.1 (group detcheck.probes): two probes are named 'kl'\n",
}


@pytest.mark.parametrize("plug_in", sorted(BROKEN_PLUG_INS))
def test_a_broken_plug_in_is_one_line_naming_it_and_exit_2_and_help_still_works(tmp_path, plug_in):
    """A plug-in that raises on import, or whose ProbeKind is refused, stops the commands that
    need the registry with the bad-input line and exit 2, not a traceback; `--help`, which
    needs none, still works."""
    plug_in_dir = ROOT / "tests" / "data" / f"external_probe_{plug_in}"
    helped = detcheck_on_path(plug_in_dir, "--help")
    assert (helped.returncode, helped.stderr) == (0, "") and "usage: detcheck" in helped.stdout
    listed = detcheck_on_path(plug_in_dir, "probes")
    assert (listed.returncode, listed.stderr, listed.stdout) == (2, BROKEN_PLUG_INS[plug_in], "")
    suite = refserver_suite(tmp_path / "kl.toml", ["kl"])
    run = detcheck_on_path(plug_in_dir, "run", "--suite", str(suite), "--out", str(tmp_path / "run"),
                           "--no-progress")
    assert run.returncode == 2 and run.stderr.endswith(BROKEN_PLUG_INS[plug_in]), run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "run").exists()


# The served figures still descriptive with no A/A test showing them vary between two servers of
# one revision (issue 44): reviewed, and pinned, so a figure added as descriptive without its A/A
# test fails below instead of joining them unseen.
AWAITING_AA = {
    ("kl", "degenerate_prompts"), ("swa_peak", "aborted"), ("swa_peak", "decode_lines"),
    ("swa_peak", "generated_tokens"), ("throughput", "requests_cut"), ("throughput", "requests_sent"),
    ("throughput", "retraction_events"), ("throughput", "retractions"), ("throughput", "swa_peak_usage_c*"),
    ("throughput", "swa_tokens_at_retraction"), ("every probe", "path"),
}


def test_every_recorded_figure_is_in_the_docs_table_and_a_descriptive_one_names_its_a_a_test():
    """docs/PROBES.md's table of every figure (deciding, through which metric, input, or
    descriptive with the A/A test that shows it varying) is generated from the registry."""
    from harness.commands.probes import figures_table
    from harness.probes.base import PIPELINE_FIGURES, FigureRole

    assert "\n".join(figures_table(shipped_probes())) in (ROOT / "docs" / "PROBES.md").read_text()
    owned = [(name, f) for name, kind in shipped_probes().items() for f in kind.figures]
    owned += [("every probe", f) for f in PIPELINE_FIGURES]
    descriptive = [(owner, f) for owner, f in owned if f.role == FigureRole.DESCRIPTIVE]
    for owner, figure in descriptive:
        if figure.aa:  # tests/<file>.py::<test>: the test exists
            file, _, test = figure.aa.partition("::")
            assert f"def {test}(" in (ROOT / file).read_text(), (owner, figure.name, figure.aa)
    assert {(owner, f.name) for owner, f in descriptive if not f.aa} == AWAITING_AA
