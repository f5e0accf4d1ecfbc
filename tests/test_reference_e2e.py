"""The reference probe end to end: the CPU rehearsal of the H200 seed suite (suites/h200/seed-unified.toml)
on the reference server's SGLang 0.5.20 → 0.5.21 pair, and its negative controls. Real processes,
real HTTP, a real git repository in a temp dir.

0.5.20's unified pool writes recurrent checkpoints to virtual slot ids (fixtures/refserver/release.py),
so its prefix-cache hits differ from the static pool's while cold requests are identical; 0.5.21
fixed it. The unified rows read *different* with each side's observation in words; static and lazy
read *same*. Controls: a pair where nothing changes reads *same*; a candidate that newly diverges
reads *different*; two sides that diverge alike read *error*, never *same*.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import detcheck, seed_unified_cpu_suite
from fresh_servers import checkout, post_reproducer
from harness.fixture_repo import FixtureRepo

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A repo: 0.5.20, 0.5.21, a changelog line on 0.5.21, then 0.5.20 again with a changelog line;
    and a run per (base, candidate) asked for, sharing one store."""
    tmp = tmp_path_factory.mktemp("reference")
    repo = FixtureRepo.create(tmp / "repo")
    revs = {}
    repo.set_release("0.5.20")
    revs["0.5.20"] = repo.commit("model SGLang 0.5.20")
    repo.set_release("0.5.21")
    revs["0.5.21"] = repo.commit("model SGLang 0.5.21")
    revs["0.5.21+note"] = repo.note("a changelog line")
    repo.set_release("0.5.20")
    revs["0.5.20 again"] = repo.commit("back to 0.5.20")
    revs["0.5.20+note"] = repo.note("another changelog line")
    suite = seed_unified_cpu_suite(tmp / "seed-unified-cpu.toml")
    runs, outs = {}, {}

    def run(base: str, cand: str, *only: str) -> tuple[dict, str]:
        """The run of the pair: the whole suite, or with configurations named the reference probe alone."""
        key = (base, cand, only)
        if key not in runs:
            out = tmp / re.sub(r"[^\w.+-]", "_", "-".join((base, cand, *only)))
            selection = [a for config in only for a in ("--config", config)] + (["--probe", "reference"] if only else [])
            proc = detcheck("run", "--target", "refserver", "--repo", str(repo.path), "--base", revs[base],
                            "--candidate", revs[cand], "--suite", str(suite), "--out", str(out),
                            *selection, "--no-progress", "--format", "md", "--slots", "2",
                            env={"DETCHECK_CACHE_DIR": str(tmp / "cache")})
            assert proc.returncode in (0, 1), proc.stderr[-3000:]
            runs[key] = (json.loads((out / "results.json").read_text()), proc.stdout)
            outs[key] = out
        return runs[key]

    run.out = outs
    run.repo, run.revs, run.tmp = repo, revs, tmp

    return run


def rows(result: dict) -> dict[str, dict]:
    return {c["config"]: c for c in result["comparisons"] if c["probe"] == "reference"}


def table_row(report: str, config: str) -> str:
    return next(line for line in report.splitlines() if line.startswith(f"| {config} | `reference`"))


def test_the_fix_reads_different_on_unified_and_same_elsewhere(pair):
    result, report = pair("0.5.20", "0.5.21")
    verdicts = {config: row["verdict"] for config, row in rows(result).items()}
    assert verdicts == {"static-graphs-off": "same", "static-graphs-on": "same", "lazy-graphs-off": "same",
                        "lazy-graphs-on": "same", "unified-graphs-off": "different", "unified-graphs-on": "different"}
    # the suite's other probes: nothing changed on the static and lazy pools; cold answers (kl's
    # decodes, revision_kl's cold scores) are the same on the unified pool too
    others = {(c["config"], c["probe"]): c["verdict"] for c in result["comparisons"] if c["probe"] != "reference"}
    assert {k: v for k, v in others.items() if not k[0].startswith("unified")} == {
        k: "same" for k in others if not k[0].startswith("unified")}
    assert {others[(f"unified-graphs-{m}", p)] for m in ("off", "on") for p in ("kl", "revision_kl")} == {"same"}
    for mode in ("off", "on"):
        row = table_row(report, f"unified-graphs-{mode}")
        # each side's observation in its column: the base's hits depart from static's, the candidate's do not
        assert re.search(rf"\| diverges from static-graphs-{mode} at hit request \d+, position \d+ "
                         rf"\(\d+ of \d+ requests: hit \d+, multiturn \d+, later_turns \d+\) \| "
                         rf"bit-identical to static-graphs-{mode} in every phase \(\d+ requests\) \| ❌ different", row), row
        judged = rows(result)[f"unified-graphs-{mode}"]["judged"]
        # cold requests are identical on 0.5.20: only hits depart (turns 3 and later are hits too)
        assert set(judged["base"]["diverging_phases"]) <= {"hit", "multiturn", "later_turns"}
        assert judged["candidate"]["diverging_requests"] == 0
    # the stored verdicts are what the stored cells give, the references' read from results.json
    check = detcheck("report", str(pair.out[("0.5.20", "0.5.21", ())]), "--check")
    assert check.returncode == 1 and "altered" not in check.stderr, check.stderr


def test_a_different_row_has_a_reproducer_of_the_divergent_phase(pair):
    result, _ = pair("0.5.20", "0.5.21")
    row = rows(result)["unified-graphs-off"]
    first = row["judged"]["base"]["first_divergence"]
    repro = row["reproducer"]
    assert repro["first_divergent"]["side"] == "base" and repro["first_divergent"]["phase"] == first["phase"]
    paths = [r["path"] for r in repro["requests"]]
    assert paths[0] == "/flush_cache" and paths[1:] == ["/generate"] * (len(paths) - 1)
    # a hit needs its seed: the cold decode, then the request cut after the divergent token; a next
    # turn the hit phase's decode too
    assert len(paths) == {"hit": 3, "multiturn": 4}.get(first["phase"], 2)
    assert repro["requests"][-1]["body"]["sampling_params"]["max_new_tokens"] == first["position"] + 1
    assert "static-graphs-off" in repro["expect"]


def test_a_different_rows_reproducer_is_verified_on_servers_of_both_configurations_and_sides(pair):
    result, report = pair("0.5.20", "0.5.21")
    for mode in ("off", "on"):
        repro = rows(result)[f"unified-graphs-{mode}"]["reproducer"]
        v = repro["verification"]
        # posted to a relaunched server of unified and of static on each side: the base's two part,
        # the candidate's agree, in every attempt at the published size
        assert v["servers"] == "relaunched" and v["reproduced"] == v["attempts"] == 2, v
        assert v["calls"] == 2 * 2 * len(repro["requests"]) * len(v["tried"]) == repro["re_measurements"]
        assert re.match(rf"on the base, at output position \d+ of the answer to the {repro['first_divergent']['phase']} "
                        rf"request.*: unified-graphs-{mode} returned token \d+ logprob \S+, static-graphs-{mode} token "
                        rf"\d+ logprob \S+; on the candidate, unified-graphs-{mode} and static-graphs-{mode} returned the "
                        rf"same answers", v["observed"]), v["observed"]
        assert repro["expect"].startswith("observed on the servers of both sides (2 of 2 attempts): on the base")
    # the report starts the reference configuration's servers too, each side's own argv
    assert "# and the reference configuration static-graphs-off, each side likewise" in report
    assert "Verified: reproduced 2 of 2 on servers of both sides (relaunched) at max_new_tokens" in report


def test_the_verified_reproducer_differs_on_fresh_servers_as_a_reviewer_posts_it(pair):
    """The published requests with their curl lines, to a fresh server of unified and of static
    from a checkout of each side: the base's answers part where the reproducer says, the
    candidate's are bit-identical."""
    result, _ = pair("0.5.20", "0.5.21")
    row = rows(result)["unified-graphs-off"]
    repro, first = row["reproducer"], row["judged"]["base"]["first_divergence"]
    served = {}
    for side, rev in (("base", "0.5.20"), ("candidate", "0.5.21")):
        tree = checkout(pair.repo, pair.revs[rev], pair.tmp / f"fresh-{side}")
        for config in ("unified-graphs-off", "static-graphs-off"):
            argv = next(c for c in result["cells"] if c["config"] == config and c["probe"] == "reference"
                        and c["role"] == side)["metadata"]["server_argv"]
            answers = post_reproducer(argv, tree, repro, pair.tmp / f"fresh-{side}-{config}.log")
            meta = answers[-1]["meta_info"]
            served[side, config] = list(zip(answers[-1]["output_ids"], (e[0] for e in meta["output_token_logprobs"])))
    j = first["position"]
    assert served["base", "unified-graphs-off"][j] != served["base", "static-graphs-off"][j]
    assert served["base", "unified-graphs-off"][:j] == served["base", "static-graphs-off"][:j]
    assert served["candidate", "unified-graphs-off"] == served["candidate", "static-graphs-off"]


def test_nothing_changes_reads_same(pair):
    result, _ = pair("0.5.21", "0.5.21+note", "unified-graphs-off", "lazy-graphs-on")
    verdicts = {config: row["verdict"] for config, row in rows(result).items()}
    # the planner ran each reference (and its own reference) although --config left them out
    assert verdicts == {"unified-graphs-off": "same", "lazy-graphs-on": "same", "static-graphs-off": "same",
                        "static-graphs-on": "same"}


def test_a_candidate_that_newly_diverges_reads_different(pair):
    result, report = pair("0.5.21", "0.5.20 again", "unified-graphs-off")
    row = rows(result)["unified-graphs-off"]
    assert row["verdict"] == "different"
    assert row["judged"]["base"]["diverging_requests"] == 0
    assert row["judged"]["candidate"]["diverging_requests"] > 0
    assert "| bit-identical to static-graphs-off in every phase" in table_row(report, "unified-graphs-off")


def test_sides_that_diverge_alike_never_read_same(pair):
    result, report = pair("0.5.20 again", "0.5.20+note", "unified-graphs-off")
    row = rows(result)["unified-graphs-off"]
    # equal metrics, the same defect on both sides: an error that says so
    assert row["verdict"] == "error"
    assert row["note"].startswith("both sides diverge from static-graphs-off alike (diverges from static-graphs-off at ")
    assert rows(result)["static-graphs-off"]["verdict"] == "same"
