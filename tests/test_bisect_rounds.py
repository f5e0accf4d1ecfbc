"""The bisect driver with its rounds evaluated elsewhere (`bisect(..., rounds=…)`, what
harness.slurm hands it), and without idle time (issue 36): the checkouts of commits the next round
may pick never hold up the revert confirmation. No server starts: the rounds are judged by a fake."""

from __future__ import annotations

import threading

from conftest import ROOT
from harness.bisect import driver as bisect_mod
from harness.bisect import DIFFERENT, SAME, BisectSpec, Evaluation, bisect
from harness.fixture_repo import FixtureRepo


def history(tmp_path, commits: int, culprit: int):
    repo = FixtureRepo.create(tmp_path / "repo")
    good = repo.head()
    shas = []
    for i in range(commits):
        if i == culprit:
            repo.edit("cache")
            shas.append(repo.commit("planted regression: cache"))
        else:
            shas.append(repo.note(f"commit {i}"))
    return repo, good, shas


class FakeRounds:
    """Judges each commit by whether it holds the culprit (a revert of it on bad: same)."""

    def __init__(self, bad_from: set[str]):
        self.bad_from = bad_from
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, spec, shas, phase, slots):
        self.calls.append((phase, list(shas)))
        return [Evaluation(phase, sha, "", "different" if sha in self.bad_from else "same",
                           DIFFERENT if sha in self.bad_from else SAME, 1, 1) for sha in shas]


def spec_for(tmp_path, repo, good) -> BisectSpec:
    return BisectSpec(repo=repo.path, good=good, suite=ROOT / "suites" / "default.toml",
                      probes=("prefill_cache_hit",), target="refserver", store_root=tmp_path / "store",
                      session_dir=tmp_path / "session")


def test_rounds_elsewhere_drive_the_kary_search_at_any_slot_count(tmp_path, monkeypatch):
    monkeypatch.setattr(bisect_mod, "prepare", lambda *a: None)
    repo, good, shas = history(tmp_path, 9, culprit=5)
    for slots in (1, 3):
        fake = FakeRounds(set(shas[5:]))
        out = bisect(spec_for(tmp_path, repo, good), shas[-1], say=lambda line: None, slots=slots, rounds=fake)
        assert out.first_bad[0] == shas[5] and out.confirmed is True
        phases = [phase for phase, _ in fake.calls]
        assert phases[0] == "endpoint" and phases[-1] == "confirm" and set(phases[1:-1]) == {"step"}
        assert all(len(commits) <= slots for phase, commits in fake.calls if phase == "step")
        assert out.rounds <= out.bound  # 1 slot: ⌈log2 9⌉ + 1 rounds of one commit, a binary search


def test_the_confirmation_never_waits_for_checkouts_the_next_round_would_have_needed(tmp_path, monkeypatch):
    """Before: the driver's prefetch pool was joined when the last round ended, so the
    confirmation waited for every commit queued for a round that never came. Here a checkout
    never ends until the bisect has: the confirmation must start while one is still running."""
    running, released = set(), threading.Event()

    def stuck_prepare(spec, sha, timeout_s):
        running.add(sha)
        released.wait(120)  # a checkout that takes as long as the bisect does (bounded: a driver that
        # waits for it fails, after a while, instead of hanging)
        running.discard(sha)

    monkeypatch.setattr(bisect_mod, "prepare", stuck_prepare)
    repo, good, shas = history(tmp_path, 20, culprit=13)
    fake = FakeRounds(set(shas[13:]))
    checkouts_at_confirm = []

    def rounds(spec, commits, phase, slots):
        if phase == "confirm":
            checkouts_at_confirm.append(set(running))
        return fake(spec, commits, phase, slots)

    try:
        out = bisect(spec_for(tmp_path, repo, good), shas[-1], say=lambda line: None, slots=2, rounds=rounds)
    finally:
        released.set()
    assert out.first_bad[0] == shas[13] and out.confirmed is True
    assert checkouts_at_confirm and checkouts_at_confirm[0]  # a checkout still running, not waited for
