"""Demo scenarios: a fixture repo with one planted regression, run end to end on CPU.

Each scenario names the suite it runs, the regression its candidate commit plants, and the
verdicts a working harness must print. `reverse` swaps the sides: base broken, candidate fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.fixture_repo import FixtureRepo
from harness.targets import PROJECT_ROOT

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
                 {("eagle", "accept_length"): "different", ("dflash", "accept_length"): "different"}),
    )
}


@dataclass(frozen=True)
class DemoRepo:
    path: Path
    base: str
    candidate: str


def build_repo(scenario: Scenario, root: Path, reverse: bool = False) -> DemoRepo:
    repo = FixtureRepo.create(root / f"refserver-{scenario.name}")
    clean = repo.head()
    repo.edit(scenario.regression)
    broken = repo.commit(f"planted regression: {scenario.regression}")
    if reverse:
        repo.edit(scenario.regression, undo=True)
        fixed = repo.commit(f"fix: {scenario.regression}")
        return DemoRepo(repo.path, broken, fixed)
    return DemoRepo(repo.path, clean, broken)


def check_expected(scenario: Scenario, verdicts: dict[tuple[str, str], str]) -> list[str]:
    """Rows whose verdict differs from what the scenario plants; empty when all match."""
    problems = []
    for key, verdict in verdicts.items():
        want = scenario.expected.get(key, "same")
        if verdict != want and verdict != "n/a":
            problems.append(f"{key[0]}/{key[1]}: expected {want}, got {verdict}")
    return problems
