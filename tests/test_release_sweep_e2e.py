"""The release sweep (issue 46) on the reference server's models of SGLang 0.5.16 … 0.5.23: a
fixture repository with one commit per release (`FixtureRepo.set_release`), every adjacent pair
run on suites/release-sweep.toml with one shared store, and one combined report. Each release's
servers start once in the whole sweep (the store serves a release's exact cells to its second
pair: N releases cost N server sets, not 2(N−1)), and the seeds' fixes show exactly at the
releases that carry them: seed (a) at 0.5.18, seed (b) at 0.5.21, its follow-up at 0.5.22.

The workload is the suite's, made lean (fewer prompts, shorter outputs) and without throughput:
a noisy probe is measured again in every run (exact figures compare across runs, noisy ones only
within one), so it would cost every release two server sets; the GPU sweep keeps it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT, detcheck, run_pair
from harness.fixture_repo import FixtureRepo

SWEEP = ROOT / "suites/release-sweep.toml"
RELEASES = ("0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
EXACT_PROBES = ("kl", "prefill_cache_hit", "decode_cache_hit", "reference", "accept_length", "swa_peak")
# The suite's workload → a CPU test's (the same shapes: hits past the prompt, output past the SWA pool).
LEAN = {"prompts = 6": "prompts = 2", "output_len = 96": "output_len = 16",
        "output_len = 1200    # past": "output_len = 900    # past"}

# The rows each fix turns *different*, at the pair that carries it; every other pair's rows are not.
SEED_A = {("dflash-swa", "swa_peak"), ("dspark-swa", "swa_peak")}
SEED_B = {("unified-graphs-off", "decode_cache_hit"), ("unified-graphs-on", "decode_cache_hit"),
          ("unified-graphs-off", "reference"), ("unified-graphs-on", "reference")}
SEED_B_FOLLOW_UP = {("dspark-unified-graphs-on", "accept_length")}
# What else 0.5.21's fix moves: prefill hits on the unified pool, and DSPARK's accept length there
# (its target's hits, and the follow-up's stale draft state with graphs on).
AT_0521 = {("unified-graphs-off", "prefill_cache_hit"), ("unified-graphs-on", "prefill_cache_hit"),
           ("dspark-unified-graphs-off", "accept_length"), ("dspark-unified-graphs-on", "accept_length")}


def lean_sweep(path: Path) -> Path:
    text = SWEEP.read_text().replace('"../', f'"{ROOT}/')
    for suite_line, lean_line in LEAN.items():
        assert suite_line in text, suite_line  # the suite still has the workload this test shrinks
        text = text.replace(suite_line, lean_line, 1)
    path.write_text(text)
    return path


def release_repo(path: Path) -> tuple[FixtureRepo, dict[str, str]]:
    repo = FixtureRepo.create(path)
    shas = {}
    for release in RELEASES:
        repo.set_release(release)
        shas[release] = repo.commit(f"SGLang {release}")
    return repo, shas


def differing(result: dict) -> set[tuple[str, str]]:
    return {(c["config"], c["probe"]) for c in result["comparisons"] if c["verdict"] == "different"}


@pytest.mark.slow
def test_release_sweep_finds_each_seed_fix_at_its_release_and_measures_each_release_once(tmp_path):
    repo, shas = release_repo(tmp_path / "repo")
    suite = lean_sweep(tmp_path / "release-sweep.toml")
    probes = [arg for p in EXACT_PROBES for arg in ("--probe", p)]
    env = {"DETCHECK_CACHE_DIR": str(tmp_path / "cache")}
    pairs = list(zip(RELEASES, RELEASES[1:]))
    results, outs = {}, []
    for base, candidate in pairs:
        out = tmp_path / "runs" / f"{base}-{candidate}"
        # --reproducer-budget 0: a *different* row's reproducer comes from the stored samples, so
        # that every server start counted below is a measurement's.
        _, results[base, candidate], _ = run_pair(repo, shas[base], shas[candidate], suite, out, *probes,
                                                  "--store", str(tmp_path / "store"), "--reproducer-budget", "0",
                                                  "--slots", "2", env=env)
        outs.append(out)

    # Each (release, configuration) started at most once over the whole sweep, and every release
    # started the same configurations: N server sets.
    starts = Counter((launch["sha"], launch["config"]) for r in results.values() for launch in r["launches"])
    assert max(starts.values()) == 1, [k for k, n in starts.items() if n > 1]
    per_release = Counter(sha for sha, _ in starts)
    assert set(per_release) == set(shas.values()), per_release
    served = {config for sha, config in starts if sha == shas["0.5.18"]}
    assert served and all({c for s, c in starts if s == sha} == served for sha in shas.values()), starts

    found = {pair: differing(result) for pair, result in results.items()}
    assert found[("0.5.17", "0.5.18")] == SEED_A, found
    assert SEED_B <= found[("0.5.20", "0.5.21")] <= SEED_B | AT_0521, found
    assert found[("0.5.21", "0.5.22")] == SEED_B_FOLLOW_UP, found
    assert found[("0.5.18", "0.5.19")] == found[("0.5.22", "0.5.23")] == set(), found
    # The changes release.py names: 0.5.17's unified pool boots (0.5.16's fails), 0.5.20's serves DSPARK.
    assert {config for config, _ in found[("0.5.16", "0.5.17")]} <= {"unified-graphs-off", "unified-graphs-on"}, found
    assert {config for config, _ in found[("0.5.19", "0.5.20")]} <= {"dspark-unified-graphs-off",
                                                                     "dspark-unified-graphs-on"}, found
    # Seed (a) before the fix fills the SWA pool (8,192 × 0.1 = 819 tokens) with the generated
    # tokens; after it, eviction holds it lower (every 128 iterations: a high sawtooth at block size 8).
    for config in ("dflash-swa", "dspark-swa"):
        peaks = {c["role"]: {m["name"]: m["values"][0] for m in c["metrics"]}
                 for c in results[("0.5.17", "0.5.18")]["cells"] if c["config"] == config and c["probe"] == "swa_peak"}
        assert peaks["base"]["swa_peak"] >= 0.98 * 819 > peaks["candidate"]["swa_peak"], peaks
        assert peaks["base"]["swa_plateau"] > peaks["candidate"]["swa_plateau"], peaks

    report = detcheck("report", *map(str, outs), "--format", "md")
    assert report.returncode == 0, report.stderr[-2000:]
    for base, candidate in pairs:
        assert shas[base][:7] in report.stdout and shas[candidate][:7] in report.stdout
    (tmp_path / "combined.md").write_text(report.stdout)
