"""revision_kl end to end on the reference server: a change that moves served logprobs alike in
decode, replay and cache hits reads *same* on every other probe and *different* here, at its
first divergent position; a rename reads *same* here exactly; and the reproducer of a
*different* verdict, posted with its own curl lines to a fresh server of each side, shows the
difference. Real processes, real HTTP, a real git repository per module.
"""

from __future__ import annotations

import json

import pytest

from conftest import detcheck, refserver_suite
from fresh_servers import checkout, post_reproducer
from harness.fixture_repo import FixtureRepo
from harness.results import Request

pytestmark = pytest.mark.slow

SELF_PROBES = ["kl", "prefill_cache_hit", "decode_cache_hit", "determinism"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A repo with a base and one candidate per planted change (each on the base alone), and
    one run per candidate."""
    tmp = tmp_path_factory.mktemp("revkl")
    repo = FixtureRepo.create(tmp / "repo")
    revs = {"base": repo.head()}
    for name in ("logit-scale", "rename", "batch-noise", "cache"):
        repo.edit(name)
        revs[name] = repo.commit(f"plant {name}")
        repo.edit(name, undo=True)
        repo.commit(f"undo {name}")
    suite = refserver_suite(tmp / "revkl.toml", [*SELF_PROBES, "revision_kl"], prompts=4, prompt_len=(40, 90),
                            output_len=16, args=("--mamba-track-interval", "16"),
                            tables="[probe.determinism]\nmax_batch_size = 3\n")
    runs = {}

    def run(candidate: str) -> tuple[dict, str]:
        if candidate not in runs:
            out = tmp / f"run-{candidate}"  # never the cache dir: the planted `cache` is a candidate
            proc = detcheck("run", "--repo", str(repo.path), "--base", revs["base"], "--candidate", revs[candidate],
                            "--suite", str(suite), "--out", str(out), "--no-progress", "--format", "md",
                            env={"DETCHECK_CACHE_DIR": str(tmp / "cache")})
            assert proc.returncode in (0, 1), proc.stderr[-3000:]
            runs[candidate] = (json.loads((out / "results.json").read_text()), proc.stdout)
        return runs[candidate]

    return repo, revs, run, tmp


def comparison(result: dict, probe: str) -> dict:
    return next(c for c in result["comparisons"] if c["probe"] == probe)


def test_a_self_consistent_logit_change_is_different_only_on_revision_kl(pair):
    _, _, run, _ = pair
    result, report = run("logit-scale")
    for probe in SELF_PROBES:
        assert comparison(result, probe)["verdict"] == "same", comparison(result, probe)
    comp = comparison(result, "revision_kl")
    assert comp["verdict"] == "different" and comp["decided_by"] == "scored_logprobs", comp["note"]
    facts = comp["judged"]["candidate"]
    first = facts["first_divergent"]
    assert first == {"prompt": 0, "position": 1}  # every logit moved: from the first scored position on
    assert facts["kl_mean"] > 0 and facts["k3_mean"] > 0 and facts["prompts_diverged"] == 4
    rep = comp["reproducer"]
    assert rep["prompts"] == [0] and rep["first_divergent"]["position"] == first["position"]
    # posted to both sides' servers before it was published: the samples' cut shows it
    v = rep["verification"]
    assert v["reproduced"] == v["attempts"] == 2 and v["tried"] == [[2, True], [2, True]]
    assert rep["re_measurements"] == v["calls"] == 2 * v["attempts"]  # one request per side an attempt
    assert "**Reproducer**" in report and Request.from_dict(rep["requests"][0]).curl_to_port_variable() in report
    assert "different" not in " ".join(c["verdict"] for c in result["comparisons"] if c["probe"] != "revision_kl")


def test_a_rename_reads_same_exactly_everywhere(pair):
    _, _, run, _ = pair
    result, _ = run("rename")
    assert {c["probe"]: c["verdict"] for c in result["comparisons"]} == {p: "same" for p in
                                                                        [*SELF_PROBES, "revision_kl"]}
    comp = comparison(result, "revision_kl")
    assert all(m["kind"] == "exact" and m["note"].startswith("identical") for m in comp["metrics"].values())
    assert comp["judged"]["candidate"]["kl_max"] == 0.0 and "reproducer" not in comp


def test_the_reproducer_shows_the_difference_on_fresh_servers_of_each_side(pair):
    repo, revs, run, tmp = pair
    result, _ = run("logit-scale")
    comp = comparison(result, "revision_kl")
    rep = comp["reproducer"]
    answers = {}
    for role, sha in (("base", revs["base"]), ("candidate", revs["logit-scale"])):
        cell = next(c for c in result["cells"] if c["probe"] == "revision_kl" and c["role"] == role)
        (answer,) = post_reproducer(cell["metadata"]["server_argv"], checkout(repo, sha, tmp / f"fresh-{role}"),
                                    rep, tmp / f"fresh-{role}.log")
        answers[role] = answer["meta_info"]
    j = rep["first_divergent"]["position"]
    base, cand = (answers[r]["input_token_logprobs"] for r in ("base", "candidate"))
    assert len(base) == len(cand) == j + 1  # the shrunk sequence: up to the first divergent position
    assert base[:j] == cand[:j] and base[j][0] != cand[j][0]
    # the same values the run stored: the reproducer reproduces what was measured
    stored = next(c for c in result["cells"] if c["probe"] == "revision_kl" and c["role"] == "base")
    assert base[j][0] == stored["samples"][rep["prompts"][0]]["scored_logprobs"][j - 1]


@pytest.mark.parametrize("planted, probe", [("batch-noise", "kl"), ("cache", "prefill_cache_hit"),
                                            ("cache", "decode_cache_hit")])
def test_a_self_comparison_reproducer_diverges_on_its_side_only(pair, planted, probe):
    """kl and cache-hit reproducers: a decode (or hit) and its cold replay, posted to a fresh
    server of each side, disagree on the side the run found diverging and agree on the other."""
    repo, revs, run, tmp = pair
    result, _ = run(planted)
    comp = comparison(result, probe)
    assert comp["verdict"] == "different", comp["note"]
    rep = comp["reproducer"]
    first = rep["first_divergent"]
    v = rep["verification"]
    assert first["side"] == "candidate" and v["reproduced"] == v["attempts"] == 2
    assert v["tried"][0] == [first["position"] + 1, True]  # the samples' cut showed it
    assert rep["re_measurements"] == v["calls"] > 0
    if probe == "decode_cache_hit":
        start, end = rep["position_range"]
        assert end == first["cached_tokens"] and end - start <= 16  # within one track interval
    agree = {}
    for role in ("base", "candidate"):
        cell = next(c for c in result["cells"] if c["probe"] == probe and c["role"] == role)
        answers = post_reproducer(cell["metadata"]["server_argv"],
                                  checkout(repo, revs[role if role == "base" else planted],
                                           tmp / f"{planted}-{probe}-{role}"),
                                  rep, tmp / f"{planted}-{probe}-{role}.log")
        decoded, replayed = answers[-3]["meta_info"], answers[-1]["meta_info"]
        j = first["position"]
        assert len(decoded["output_token_logprobs"]) == j + 1
        agree[role] = decoded["output_token_logprobs"][j][0] == replayed["input_token_logprobs"][-1][0]
    assert agree == {"base": True, "candidate": False}


def test_without_deterministic_mode_the_shift_is_judged_paired_against_the_bases_own_noise(pair):
    """Default mode: each side scores twice; KL(base ‖ candidate) per prompt against the base's
    run-to-run KL, Wilcoxon over 8 prompts, beyond the declared 1e-3 floor; a rename: same."""
    repo, revs, _, tmp = pair
    suite = refserver_suite(tmp / "noisy.toml", ["revision_kl"], prompts=8, output_len=6, deterministic=False)
    verdicts = {}
    for candidate in ("logit-scale", "rename"):
        out = tmp / f"noisy-{candidate}"
        proc = detcheck("run", "--repo", str(repo.path), "--base", revs["base"], "--candidate", revs[candidate],
                        "--suite", str(suite), "--out", str(out), "--no-progress",
                        env={"DETCHECK_CACHE_DIR": str(tmp / "cache")})
        assert proc.returncode in (0, 1), proc.stderr[-3000:]
        verdicts[candidate] = comparison(json.loads((out / "results.json").read_text()), "revision_kl")
    shifted, renamed = verdicts["logit-scale"], verdicts["rename"]
    kl = shifted["metrics"]["kl"]
    assert shifted["verdict"] == "different" and shifted["decided_by"] == "kl", shifted["note"]
    assert kl["kind"] == "noisy" and kl["paired"] and kl["effect"] > 1e-3 and kl["p"] < 0.05
    assert len(shifted["reproducer"]["prompts"]) == 1 and shifted["reproducer"]["requests"]
    assert renamed["verdict"] == "same" and "identical samples" in renamed["metrics"]["kl"]["note"]
