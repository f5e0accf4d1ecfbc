"""Bisect end to end: a real fixture repo, real `git bisect run`, real reference servers.

One history (17 commits after good: a planted cache regression and an unbuildable commit) is
bisected once per module; the tests read its transcript, re-run it, and call the predicate.
A second (33 commits) is bisected k-ary with 2 slots; the range splitting and narrowing are
also tested as pure functions.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, detcheck
from harness.bisect import predicate as bisect_mod
from harness.bisect import (ABORT, DIFFERENT, SAME, SKIP, BisectSpec, Evaluation, Span, evaluate, narrow,
                            next_round_points, next_scale, round_bound, session_dir_for, split_points)
from harness.verdict_stats import Comparison, Kind, Summary, Verdict
from harness.demo import build_demo_history
from harness.results import (CellResult, Launch, ProbeComparison, RevisionInfo, Role, RunPlan, RunResult,
                             Status)

SUITE = ROOT / "suites" / "default.toml"
COMMITS = 17
ARGS = ["--suite", str(SUITE), "--probe", "prefill_cache_hit", "--config", "deterministic"]


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    root = tmp_path_factory.mktemp("bisect")
    h = build_demo_history(root, seed=5, commits=COMMITS)
    return h, {"DETCHECK_CACHE_DIR": str(root / "cache")}, root / "store"


@pytest.fixture(scope="module")
def first_run(history):
    """`detcheck run` good vs bad first, so the bisect can reuse its endpoint cells."""
    h, env, store = history
    run = detcheck("run", "--repo", str(h.path), "--base", h.good, "--candidate", h.bad, *ARGS,
                   "--store", str(store), "--out", str(store.parent / "run"), "--no-progress",
                   "--format", "json", env=env)
    bis = detcheck("bisect", "--repo", str(h.path), "--good", h.good, "--bad", h.bad, *ARGS,
                   "--store", str(store), env=env)
    return run, bis


@pytest.mark.slow
def test_finds_the_planted_commit_within_the_bound(history, first_run):
    h, _, _ = history
    run, bis = first_run
    assert run.returncode == 1, run.stderr  # the endpoints differ
    assert bis.returncode == 0, bis.stdout + bis.stderr
    out = bis.stdout
    assert f"first bad commit: {h.culprit[:12]}" in out
    steps = re.findall(r"^step (\d+) ", out, re.M)
    assert 0 < len(steps) <= math.ceil(math.log2(COMMITS)) + 2
    assert "confirmed: bad with" in out and "compares same to good" in out


@pytest.mark.slow
def test_skips_the_unbuildable_commit(history, first_run):
    h, _, _ = history
    line = next(l for l in first_run[1].stdout.splitlines() if l.startswith("step") and h.unbuildable[:12] in l)
    assert "skip" in line and "exit 125" in line and "not launched" in line


@pytest.mark.slow
def test_reuses_the_cells_of_an_earlier_run(first_run):
    endpoint = next(l for l in first_run[1].stdout.splitlines() if l.startswith("endpoint"))
    assert "different" in endpoint and "reused" in endpoint


@pytest.mark.slow
def test_a_rerun_launches_no_server(history, first_run):
    h, env, store = history
    again = detcheck("bisect", "--repo", str(h.path), "--good", h.good, "--bad", h.bad, *ARGS,
                     "--store", str(store), env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"first bad commit: {h.culprit[:12]}" in again.stdout
    assert "servers launched: 0" in again.stdout
    assert "measured (" not in again.stdout


@pytest.mark.slow
def test_leaves_the_users_checkout_alone(history, first_run):
    h, _, _ = history

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(h.path), *a], capture_output=True, text=True).stdout

    assert git("rev-parse", "HEAD").strip() == h.bad
    assert git("status", "--porcelain") == ""
    assert "/bisect/" not in git("worktree", "list")  # the bisect worktree is gone
    assert not git("for-each-ref", "refs/bisect")


def _session(history, monkeypatch) -> Path:
    h, env, _ = history
    monkeypatch.setenv("DETCHECK_CACHE_DIR", env["DETCHECK_CACHE_DIR"])
    return session_dir_for(h.path, h.good, h.bad)


@pytest.mark.parametrize("which, code", [("before_culprit", SAME), ("culprit", DIFFERENT),
                                         ("unbuildable", SKIP)])
@pytest.mark.slow
def test_predicate_exit_codes(history, first_run, monkeypatch, which, code):
    h, env, _ = history
    sha = {"before_culprit": _parent_of(h, h.culprit), "culprit": h.culprit,
           "unbuildable": h.unbuildable}[which]
    step = detcheck("bisect-step", "--session", str(_session(history, monkeypatch)), "--commit", sha, env=env)
    assert step.returncode == code, step.stdout + step.stderr
    assert sha[:12] in step.stdout


@pytest.mark.slow
def test_predicate_aborts_when_the_good_endpoint_fails(history, first_run, monkeypatch, tmp_path):
    """git bisect stops on 128+: a broken good endpoint must not read as "bad"."""
    h, env, _ = history
    spec = BisectSpec.load(_session(history, monkeypatch))
    broken = dataclasses.replace(spec, good=h.unbuildable, session_dir=tmp_path)
    broken.save()
    step = detcheck("bisect-step", "--session", str(tmp_path), "--commit", h.bad, env=env)
    assert step.returncode == ABORT, step.stdout + step.stderr
    assert "good endpoint cannot be measured" in step.stdout


def test_bad_input_is_exit_2(history):
    h, env, _ = history
    reversed_range = detcheck("bisect", "--repo", str(h.path), "--good", h.bad, "--bad", h.good, *ARGS, env=env)
    assert reversed_range.returncode == 2 and "not an ancestor" in reversed_range.stderr
    unknown = detcheck("bisect", "--repo", str(h.path), "--good", h.good, "--bad", h.bad,
                       "--suite", str(SUITE), "--probe", "nope", env=env)
    assert unknown.returncode == 2 and "unknown probe" in unknown.stderr


def _parent_of(h, sha: str) -> str:
    return subprocess.run(["git", "-C", str(h.path), "rev-parse", f"{sha}^"], capture_output=True,
                          text=True, check=True).stdout.strip()


# --------------------------------------------------------------------------- unknown → more prompts


def _result(verdict: str, launches: int = 1) -> RunResult:
    rev = RevisionInfo("r", "0" * 40)

    def cell(role: Role) -> CellResult:
        return CellResult("c", "p", role, rev, Status.OK, "cfg", "wl")

    return RunResult("s", "refserver", rev, rev, (cell(Role.BASE), cell(Role.CANDIDATE)),
                     (ProbeComparison("c", "p", verdict, note=f"{verdict} note"),),
                     tuple(Launch("c", Role.CANDIDATE, "0" * 40, 1, 0.1, True) for _ in range(launches)),
                     # as a finished run records it: both cells planned, the record complete
                     plan=RunPlan("t", (("c", "p", Role.BASE), ("c", "p", Role.CANDIDATE)), {}, complete=True))


@pytest.mark.parametrize("verdicts, code, scale", [
    (["unknown", "different"], DIFFERENT, 2),
    (["unknown", "unknown", "same"], SAME, 4),
    (["unknown"] * 4, SKIP, 8),
])
def test_unknown_is_measured_again_with_more_prompts(monkeypatch, tmp_path, verdicts, code, scale):
    scales: list[int] = []

    def fake_execute(req):
        scales.append(req.workload_scale)
        return _result(verdicts[len(scales) - 1])

    monkeypatch.setattr(bisect_mod, "execute", fake_execute)
    monkeypatch.setattr(bisect_mod.Revision, "resolve", classmethod(lambda cls, repo, ref: None))
    spec = BisectSpec(repo=tmp_path, good="0" * 40, suite=SUITE, probes=("p",), session_dir=tmp_path,
                      max_scale=8)
    ev = evaluate(spec, "1" * 40)
    assert (ev.exit_code, ev.scale) == (code, scale)
    assert scales == [1, 2, 4, 8][: len(scales)] and len(scales) == len(verdicts)
    assert ev.launches == len(verdicts)
    if code == SKIP:
        assert ev.verdict == "unknown" and "still unknown with 8× prompts" in ev.note


def _unknown_needing(needed: int, n: int = 8) -> RunResult:
    summary = Summary(n, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    comp = Comparison(Kind.NOISY, Verdict.UNKNOWN, summary, summary, 0.1, (-0.1, 0.3), 0.2, 0.1, None,
                      "not significant", paired=True, needed=needed)
    result = _result("unknown")
    return dataclasses.replace(result, comparisons=(
        ProbeComparison("c", "p", "unknown", {"m": comp}, "m: not significant"),))


def test_unknown_is_measured_again_with_the_prompts_its_comparison_asks_for():
    # 8 values, 20 needed: ×3 the prompts; capped by max_scale; none beyond it
    assert next_scale(_unknown_needing(20), 1, 8) == 3
    assert next_scale(_unknown_needing(200), 1, 8) == 8
    assert next_scale(_unknown_needing(9), 2, 8) == 3  # at least one step up
    assert next_scale(_unknown_needing(20), 8, 8) is None
    assert next_scale(_result("unknown"), 2, 8) == 4  # no estimate: twice the prompts


def test_a_step_line_says_where_its_results_are():
    ev = Evaluation("step", "1" * 40, "subject", "skip", SKIP, 2, 1, "launch failed", "/s/runs/x/results.json")
    assert "results: /s/runs/x/results.json" in ev.line("step 1")


def test_a_long_subject_is_cut_at_a_words_end():
    from harness.textfmt import shortened

    subject = "scheduler: keep the SWA eviction interval when a DFLASH draft step retracts requests"
    ev = Evaluation("step", "1" * 40, subject, "same", 0, 1, 1)
    assert "'scheduler: keep the SWA eviction interval when a DFLASH…'" in ev.line("step 1")
    assert shortened("short", 60) == "short" and shortened("x" * 70, 10) == "x" * 9 + "…"


# --------------------------------------------------------------------------- k-ary bisect

KARY_COMMITS, KARY_SEED = 33, 12  # seed 12 plants the regression where 2 slots meet the unbuildable commit


@pytest.fixture(scope="module")
def kary(tmp_path_factory):
    root = tmp_path_factory.mktemp("kary")
    h = build_demo_history(root, seed=KARY_SEED, commits=KARY_COMMITS)
    env = {"DETCHECK_CACHE_DIR": str(root / "cache")}
    argv = ["bisect", "--repo", str(h.path), "--good", h.good, "--bad", h.bad, *ARGS,
            "--store", str(root / "store"), "--slots", "2"]
    first = detcheck(*argv, env=env)
    # The endpoint's run as the first bisect left it (the second writes the same folder).
    where = re.search(r"^endpoint .*\n\s+results: (\S+)$", first.stdout, re.M)
    endpoint = json.loads(Path(where.group(1)).read_text()) if where else None
    return h, first, detcheck(*argv, env=env), endpoint


@pytest.mark.slow
def test_kary_finds_and_confirms_the_planted_commit_within_the_bound(kary):
    h, first, *_ = kary
    assert first.returncode == 0, first.stdout + first.stderr
    out = first.stdout
    assert f"first bad commit: {h.culprit[:12]}" in out
    assert "confirmed: bad with" in out and "compares same to good" in out
    rounds = {int(r) for r in re.findall(r"^round (\d+) ", out, re.M)}
    assert rounds == set(range(1, len(rounds) + 1))
    assert 0 < len(rounds) <= math.ceil(math.log(KARY_COMMITS, 3)) + 1 == round_bound(KARY_COMMITS, 2)
    assert all(len(re.findall(rf"^round {r} ", out, re.M)) <= 2 for r in rounds)  # at most k per round
    assert f"in {len(rounds)} rounds of 2 slots" in out


@pytest.mark.slow
def test_kary_skips_the_unbuildable_commit(kary):
    h, first, *_ = kary
    line = next(l for l in first.stdout.splitlines() if l.startswith("round") and h.unbuildable[:12] in l)
    assert "skip" in line and "exit 125" in line and "not launched" in line


@pytest.mark.slow
def test_kary_rerun_launches_no_server(kary):
    h, _, again, _ = kary
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"first bad commit: {h.culprit[:12]}" in again.stdout
    assert "servers launched: 0" in again.stdout and "measured (" not in again.stdout


@pytest.mark.slow
def test_kary_measures_both_endpoints_at_once(kary):
    h, first, _, endpoint = kary
    assert endpoint is not None, first.stdout
    assert endpoint["metadata"]["slots"] == 2
    up = sorted((l["started_at"], l["ended_at"], l["role"]) for l in endpoint["launches"])
    assert [r for *_, r in up] in (["base", "candidate"], ["candidate", "base"])
    assert up[1][0] < up[0][1]  # the second started before the first ended
    assert re.search(r"^round 1: checking out the \d+ commits the next round may pick, meanwhile$", first.stdout, re.M)


@pytest.mark.parametrize("span, points", [(Span(0, 32), [10, 21]), (Span(0, 16, frozenset({4})), [5, 10]),
                                          (Span(3, 9), [5, 7]), (Span(0, 30), [7, 15, 23])])
def test_the_next_rounds_commits_are_known_before_this_round_ends(span, points):
    """Whatever this round finds, the next round picks among the commits prepared for it."""
    slots = len(points)
    ahead = next_round_points(span, points, slots)
    assert not ahead & set(points)
    for first_bad in [*points, span.hi]:  # each outcome (without skips)
        codes = {i: DIFFERENT if i >= first_bad else SAME for i in points}
        assert set(split_points(narrow(span, codes), slots)) <= ahead
    assert len(ahead) <= slots * (slots + 1)


def test_slots_below_one_is_exit_2(history):
    h, env, _ = history
    proc = detcheck("bisect", "--repo", str(h.path), "--good", h.good, "--bad", h.bad, *ARGS, "--slots", "0", env=env)
    assert proc.returncode == 2 and "--slots 0" in proc.stderr


@pytest.mark.parametrize("commits, slots, rounds", [(17, 2, 4), (33, 2, 5), (9, 2, 3), (27, 2, 4), (10, 2, 4),
                                                    (33, 4, 4), (25, 4, 3), (2, 1, 2), (1, 4, 1)])
def test_round_bound(commits, slots, rounds):
    assert round_bound(commits, slots) == rounds  # ⌈log_(k+1) N⌉ + 1


def test_split_points_cut_the_range_into_k_plus_1_parts():
    assert split_points(Span(0, 16), 1) == [7]  # git's own first pick in 17 commits
    assert split_points(Span(0, 16), 2) == [4, 10]
    assert split_points(Span(0, 16), 4) == [2, 5, 9, 12]
    assert split_points(Span(5, 7), 4) == [5, 6]  # fewer testable commits than slots: all of them
    assert split_points(Span(3, 3), 2) == []  # found


def test_a_skipped_split_point_moves_to_a_neighbour():
    assert split_points(Span(0, 16, frozenset({4})), 2) == [5, 10]
    assert split_points(Span(0, 16, frozenset({4, 5})), 2) == [6, 11]
    assert split_points(Span(3, 5, frozenset({3, 4})), 2) == []  # only skipped ones left: ambiguous


def test_narrow_keeps_the_part_between_the_last_good_and_the_first_bad():
    assert narrow(Span(0, 16), {4: SAME, 10: DIFFERENT}) == Span(5, 10)
    assert narrow(Span(0, 16), {4: SAME, 10: SAME}) == Span(11, 16)
    assert narrow(Span(0, 16), {4: DIFFERENT, 10: DIFFERENT}) == Span(0, 4)
    assert narrow(Span(0, 16), {4: DIFFERENT, 10: SAME}) == Span(0, 4)  # a good after the first bad is outside
    assert narrow(Span(0, 16), {4: SKIP, 10: SAME}) == Span(11, 16, frozenset({4}))
    assert narrow(Span(0, 16), {4: SKIP, 10: DIFFERENT}) == Span(0, 10, frozenset({4}))


def _simulate(commits: int, slots: int, culprit: int, skipped: set[int]) -> tuple[Span, int]:
    span, rounds = Span(0, commits - 1), 0
    while points := split_points(span, slots):
        rounds += 1
        assert len(points) <= slots
        span = narrow(span, {i: SKIP if i in skipped else DIFFERENT if i >= culprit else SAME for i in points})
    return span, rounds


@pytest.mark.parametrize("slots", [1, 2, 4])
@pytest.mark.parametrize("commits", [9, 17, 33])
def test_kary_finds_every_culprit_within_the_bound(commits, slots):
    for culprit in range(commits):
        span, rounds = _simulate(commits, slots, culprit, set())
        assert span == Span(culprit, culprit) and rounds <= round_bound(commits, slots) - 1
        for skip in set(range(commits - 1)) - {culprit - 1, culprit}:  # one skip costs at most a round
            span, rounds = _simulate(commits, slots, culprit, {skip})
            assert (span.lo, span.hi) == (culprit, culprit) and rounds <= round_bound(commits, slots)
        if 0 < culprit < commits - 1:  # the commit before the culprit cannot be tested: both remain
            span, _ = _simulate(commits, slots, culprit, {culprit - 1})
            assert list(span.candidates()) == [culprit - 1, culprit]


def test_a_step_line_gives_the_first_difference_at_the_digits_that_tell_it_apart():
    """Before: `k3: differs at index 0: 0.0 vs 0.006593097613568202`, the statistic's raw note."""
    from harness.bisect import judge
    from harness.result_files import read_run

    result = read_run(Path(__file__).parent / "data" / "demo-cache.json")
    assert judge(result)[:2] == ("skip", 125) and "records no plan" in judge(result)[2]  # schema 3: never judged
    # as the run that wrote it would have recorded it: its cells planned, the record complete
    result = dataclasses.replace(result, plan=RunPlan("t", tuple((c.config, c.probe, c.role) for c in result.cells),
                                                      {}, complete=True))
    verdict, _, note = judge(result)
    assert verdict == "different"
    assert note == ("deterministic/prefill_cache_hit: k3 differs at value 0: 0 vs 0.00659; "
                    "deterministic/decode_cache_hit: k3 differs at value 0: 0 vs 0.00285")
