"""Bisect evaluations vs ⌈log2 N⌉ on seeded reference-server histories (planted cache
regression, one unbuildable commit at git's first pick), each bisected twice: fresh, then again
with the same store (no launch expected).

    python benchmarks/bench_bisect.py [N:SEED ...]       (default 9:0 17:0 33:0 33:1 33:2)
"""

from __future__ import annotations

import math
import sys
import time

from _common import ROOT, scratch
from harness.bisect import SKIP, BisectSpec, bisect
from harness.demo import build_demo_history


def run(commits: int, seed: int) -> dict:
    with scratch() as tmp:
        h = build_demo_history(tmp, seed=seed, commits=commits)
        spec = BisectSpec(repo=h.path, good=h.good, suite=ROOT / "suites" / "default.toml",
                          probes=("prefill_cache_hit",), configs=("deterministic",),
                          store_root=tmp / "store", session_dir=tmp / "session")
        t0 = time.perf_counter()
        first = bisect(spec, h.bad, say=lambda line: None)
        wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = bisect(spec, h.bad, say=lambda line: None)
        rerun = time.perf_counter() - t0
    found = first.first_bad is not None and first.first_bad[0] == h.culprit
    return {"n": commits, "seed": seed, "steps": len(first.steps), "log2": math.ceil(math.log2(commits)),
            "bound": first.bound, "skipped": sum(e.exit_code == SKIP for e in first.steps),
            "found": found, "confirmed": first.confirmed, "wall": wall, "launches": first.launches,
            "rerun": rerun, "rerun_launches": again.launches}


def main(argv: list[str]) -> None:
    cases = [tuple(int(x) for x in a.split(":")) for a in argv] or [(9, 0), (17, 0), (33, 0), (33, 1), (33, 2)]
    print("bisect evaluations vs ⌈log2 N⌉ (N = commits after good; steps = git bisect run predicate calls)")
    print(f"{'N':>3} {'seed':>4} {'steps':>5} {'⌈log2 N⌉':>8} {'bound':>5} {'skipped':>7} {'found':>5} "
          f"{'confirmed':>9} {'wall s':>6} {'launches':>8} {'re-run s':>8} {'re-run launches':>15}")
    for n, seed in cases:
        r = run(n, seed)
        print(f"{r['n']:>3} {r['seed']:>4} {r['steps']:>5} {r['log2']:>8} {r['bound']:>5} {r['skipped']:>7} "
              f"{str(r['found']):>5} {str(r['confirmed']):>9} {r['wall']:>6.0f} {r['launches']:>8} "
              f"{r['rerun']:>8.1f} {r['rerun_launches']:>15}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
