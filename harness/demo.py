"""Demo scenarios: a fixture repo with one planted regression, run end to end on CPU.

Each scenario names the suite it runs, the regression its candidate commit plants, and the
verdicts a working harness must print. `reverse` swaps the sides: base broken, candidate fixed.
"""

from __future__ import annotations

import random
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from harness.fixture_repo import FixtureRepo
from harness.gitcmd import git
from harness.paths import PROJECT_ROOT

SUITES = PROJECT_ROOT / "suites"


@dataclass(frozen=True)
class Scenario:
    name: str
    suite: Path
    regression: str
    summary: str
    # (configuration, probe) -> verdict; every other row of the table must read "same".
    expected: dict[tuple[str, str], str] = field(default_factory=dict)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("cache", SUITES / "default.toml", "cache",
                 "candidate breaks the prefix-cache path: a hit restores state unlike a cold prefill",
                 {("deterministic", "prefill_cache_hit"): "different",
                  ("deterministic", "decode_cache_hit"): "different"}),
        Scenario("swa", SUITES / "demo-swa.toml", "swa",
                 "candidate skips SWA eviction on the DFLASH/DSPARK decode path: the SWA pool "
                 "holds every generated token",
                 {("dflash", "swa_peak"): "different", ("dspark", "swa_peak"): "different"}),
        Scenario("mamba-unified", SUITES / "pools.toml", "mamba-unified",
                 "candidate writes recurrent checkpoints to virtual slot ids under the unified "
                 "Mamba pool: cache hits there restore the wrong state",
                 {("unified", "prefill_cache_hit"): "different",
                  ("unified", "decode_cache_hit"): "different"}),
        Scenario("spec-accept", SUITES / "demo-spec.toml", "spec-accept",
                 "candidate degrades the draft model: accept length drops, outputs do not change",
                 # kl's decode verifies more often too: a deterministic path counter, which decides
                 {("eagle", "accept_length"): "different", ("dflash", "accept_length"): "different",
                  ("eagle", "kl"): "different"}),
    )
}


@dataclass(frozen=True)
class DemoRepo:
    path: Path
    base: str
    candidate: str


def repo_dir(scenario: Scenario, root: Path) -> Path:
    """Where `build_repo` makes a scenario's repository under `root`."""
    return root / f"refserver-{scenario.name}"


HISTORY_DIR = "refserver-bisect"  # where build_demo_history makes its repository under its root


def build_repo(scenario: Scenario, root: Path, reverse: bool = False) -> DemoRepo:
    repo = FixtureRepo.create(repo_dir(scenario, root))
    clean = repo.head()
    repo.edit(scenario.regression)
    broken = repo.commit(f"planted regression: {scenario.regression}")
    if reverse:
        repo.edit(scenario.regression, undo=True)
        fixed = repo.commit(f"fix: {scenario.regression}")
        return DemoRepo(repo.path, broken, fixed)
    return DemoRepo(repo.path, clean, broken)


def check_expected(scenario: Scenario, verdicts: Mapping[tuple[str, str], str]) -> list[str]:
    """Rows whose verdict differs from what the scenario plants; empty when all match."""
    problems = []
    for key, verdict in verdicts.items():
        want = scenario.expected.get(key, "same")
        if verdict != want and verdict != "n/a":
            problems.append(f"{key[0]}/{key[1]}: expected {want}, got {verdict}")
    return problems


@dataclass(frozen=True)
class DemoHistory:
    path: Path
    good: str
    bad: str
    culprit: str
    unbuildable: str


def build_demo_history(root: Path, seed: int, commits: int = 33, regression: str = "cache") -> DemoHistory:
    """A fixture repo: good, then `commits` commits of notes with one planted regression at a
    seeded position and one unbuildable commit (undone by the next one).

    The unbuildable commit sits where git first looks (the range's midpoint), so the skip path
    always runs; the regression is anywhere it cannot be hidden by that skip.
    """
    repo = FixtureRepo.create(root / HISTORY_DIR)
    good = repo.head()
    mid = commits // 2  # git's first pick in a linear range of `commits` candidates
    rng = random.Random(seed)
    planted = rng.choice([i for i in range(1, commits + 1) if i not in (mid, mid + 1)])
    shas: dict[str, str] = {}
    for i in range(1, commits + 1):
        if i == planted:
            repo.edit(regression)
            shas["culprit"] = repo.commit(f"prefix cache: restore state on hit (planted regression: {regression})")
        elif i == mid:
            repo.edit("unbuildable")
            shas["unbuildable"] = repo.commit("server: reorganise imports (planted: fails at import)")
        elif i == mid + 1:
            repo.edit("unbuildable", undo=True)
            repo.commit("server: fix the import")
        else:
            repo.note(f"docs: changelog entry {i}")
    bad = repo.head()
    first = git(repo.path, "rev-list", "--bisect", bad, f"^{good}")
    if first != shas["unbuildable"]:
        raise RuntimeError(f"git's first bisect pick is {first[:12]}, not the unbuildable commit")
    return DemoHistory(repo.path, good, bad, shas["culprit"], shas["unbuildable"])


@dataclass(frozen=True)
class NoisyHistories:
    """Two histories of one repository, `commits` revisions each, sharing their first
    `planted_at`: on main only notes (an A/A history: nothing changes), on `planted` a noisy
    regression at revision `planted_at` (then notes)."""

    path: Path
    aa: tuple[str, ...]
    planted: tuple[str, ...]
    culprit: str


def build_noisy_histories(root: Path, commits: int = 20, planted_at: int = 10,
                          regression: str = "slow-decode") -> NoisyHistories:
    repo = FixtureRepo.create(root / "refserver-noisy")
    aa = [repo.head(), *(repo.note(f"docs: changelog entry {i}") for i in range(1, commits))]
    repo.branch_off("planted", aa[planted_at - 1])
    repo.edit(regression)
    culprit = repo.commit(f"scheduler: decode step bookkeeping (planted regression: {regression})")
    later = [repo.note(f"docs: changelog entry {i} (planted branch)") for i in range(planted_at + 1, commits)]
    return NoisyHistories(repo.path, tuple(aa), (*aa[:planted_at], culprit, *later), culprit)


# The bisect demo: which probe of which configuration decides each commit.
BISECT_SUITE, BISECT_CONFIG, BISECT_PROBE = SUITES / "default.toml", "deterministic", "prefill_cache_hit"


def name_branches(repo: Path, **branches: str) -> None:
    """Branches a newcomer can type (base, candidate, good) at the demo's shas."""
    for name, sha in branches.items():
        git(repo, "branch", "-f", name, sha)


def shown(path: Path) -> str:
    """A path as a command to paste should show it: relative to here when it is below here."""
    path = path.absolute()
    here = Path.cwd()
    return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)


def try_commands(scenario: Scenario, repo: Path, history: Path, run_dir: Path) -> list[str]:
    """What to type next on a kept demo: the run, its report, a bisect over the kept history."""
    return [shlex.join(["detcheck", "run", "--repo", shown(repo), "--base", "base", "--candidate",
                        "candidate", "--suite", shown(scenario.suite)]),
            shlex.join(["detcheck", "report", shown(run_dir), "--format", "md"]),
            shlex.join(["detcheck", "bisect", "--repo", shown(history), "--good", "good", "--bad", "main",
                        "--suite", shown(BISECT_SUITE), "--config", BISECT_CONFIG, "--probe", BISECT_PROBE])]
