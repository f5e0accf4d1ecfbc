"""Launches per suite, harness overhead and a cached re-run, on the CPU reference server.

For each suite: a fresh base-vs-candidate run (its own empty store), then the same run again.
overhead = (wall − server startup − probe time) / wall: what the harness itself costs (an
interleaved configuration starts its two servers at once: startup is the union of the launches'
startup spans). The second table splits the first run's wall time by pipeline step (results.json
`metadata.step_seconds`, summed over jobs, which overlap where servers start together):
checkout, the store read, `--help` (resolve_flags), the launch beyond the server's own startup
(interpreter metadata, port checks), teardown, writing results, and whatever is left (suite
loading, comparisons, Python start-up of the run itself).

    python benchmarks/bench_pipeline.py [SUITE ...]      (default: every suites/*.toml)
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from _common import ROOT, covered, scratch, two_commits
from harness.suite import load_suite
from harness.probes import known_probes
from harness.revisions import Revision
from harness.run import RunRequest, execute


def measure(suite: Path) -> dict:
    with scratch() as tmp:
        repo, base, cand = two_commits(tmp)
        req = RunRequest(suite_path=suite, target="refserver", base=Revision.resolve(repo, base),
                         candidate=Revision.resolve(repo, cand), out_dir=tmp / "run1", store_root=tmp / "store")
        t0 = time.perf_counter()
        first = execute(req)
        wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = execute(dataclasses.replace(req, out_dir=tmp / "run2"))
        rerun = time.perf_counter() - t0
    # An interleaved configuration starts both its servers at once: their startups overlap.
    startup = covered([(l.started_at, l.started_at + l.startup_s) for l in first.launches])
    probes = sum(c.metadata.get("probe_wall_s", 0.0) for c in first.cells)
    configs = len(load_suite(suite, known_probes()).configs)
    steps = dict(first.metadata.get("step_seconds", {}))
    steps["launch beyond startup"] = steps.pop("launch_server", 0.0) - sum(l.startup_s for l in first.launches)
    steps.pop("run_probes", None)  # the probes' own time is measured per cell
    steps["other"] = wall - startup - probes - sum(steps.values())
    return {"steps": steps, "suite": suite.stem, "configs": configs, "launches": len(first.launches), "wall": wall,
            "startup": startup, "probes": probes, "overhead": (wall - startup - probes) / wall,
            "rerun": rerun, "rerun_launches": len(again.launches),
            "verdicts": ",".join(sorted({c.verdict for c in first.comparisons}))}


def main(argv: list[str]) -> None:
    suites = [Path(a).resolve() for a in argv] or sorted((ROOT / "suites").glob("*.toml"))
    print("launches per suite, harness overhead, cached re-run (CPU reference server, base vs candidate)")
    print(f"{'suite':<14} {'configs×2':>9} {'launches':>8} {'wall s':>7} {'startup s':>9} {'probes s':>8} "
          f"{'overhead':>8} {'re-run s':>8} {'re-run launches':>15}  verdicts")
    rows = []
    for suite in suites:
        r = measure(suite)
        rows.append(r)
        print(f"{r['suite']:<14} {2 * r['configs']:>9} {r['launches']:>8} {r['wall']:>7.1f} {r['startup']:>9.1f} "
              f"{r['probes']:>8.1f} {r['overhead']:>8.1%} {r['rerun']:>8.2f} {r['rerun_launches']:>15}  {r['verdicts']}",
              flush=True)
    names = sorted({name for r in rows for name in r["steps"]})
    print("\nwhere the harness's own time goes (seconds of the first run, summed over jobs)")
    print(f"{'suite':<14} " + " ".join(f"{n[:12]:>12}" for n in names))
    for r in rows:
        print(f"{r['suite']:<14} " + " ".join(f"{r['steps'].get(n, 0.0):>12.2f}" for n in names))


if __name__ == "__main__":
    main(sys.argv[1:])
