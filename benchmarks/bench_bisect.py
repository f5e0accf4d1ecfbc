"""Bisect evaluations, rounds and wall time with 1, 2 and 4 slots on seeded reference-server
histories (planted cache regression, one unbuildable commit at git's first pick), each bisected
twice per slot count: fresh (own store), then again with the same store (no launch expected).
One slot is `git bisect run` (a round is a step; bound ⌈log2 N⌉ + 2 steps); k > 1 slots evaluate
k commits per round at once (bound ⌈log_(k+1) N⌉ + 1 rounds).

    python benchmarks/bench_bisect.py [N:SEED ...]       (default 17:0 33:0 33:12)
"""

from __future__ import annotations

import sys
import time

from _common import ROOT, scratch
from harness.bisect import SKIP, BisectSpec, bisect
from harness.demo import build_demo_history

SLOTS = (1, 2, 4)


def run(commits: int, seed: int, slots: int) -> dict:
    with scratch() as tmp:
        h = build_demo_history(tmp, seed=seed, commits=commits)
        spec = BisectSpec(repo=h.path, good=h.good, suite=ROOT / "suites" / "default.toml",
                          probes=("prefill_cache_hit",), configs=("deterministic",),
                          store_root=tmp / "store", session_dir=tmp / "session")
        t0 = time.perf_counter()
        first = bisect(spec, h.bad, say=lambda line: None, slots=slots)
        wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = bisect(spec, h.bad, say=lambda line: None, slots=slots)
        rerun = time.perf_counter() - t0
    found = first.first_bad is not None and first.first_bad[0] == h.culprit
    return {"n": commits, "seed": seed, "k": slots, "evals": len(first.steps),
            "rounds": first.rounds if slots > 1 else len(first.steps), "bound": first.bound,
            "skipped": sum(e.exit_code == SKIP for e in first.steps), "found": found,
            "confirmed": first.confirmed, "wall": wall, "launches": first.launches,
            "rerun": rerun, "rerun_launches": again.launches}


def main(argv: list[str]) -> None:
    cases = [tuple(int(x) for x in a.split(":")) for a in argv] or [(17, 0), (33, 0), (33, 12)]
    print("bisect with k slots (N = commits after good; evals = commits judged, endpoint and revert not "
          "counted; k = 1: git bisect run, bound in steps; k > 1: bound ⌈log_(k+1) N⌉ + 1 rounds)")
    print(f"{'N':>3} {'seed':>4} {'k':>2} {'evals':>5} {'rounds':>6} {'bound':>5} {'skipped':>7} {'found':>5} "
          f"{'confirmed':>9} {'wall s':>6} {'launches':>8} {'re-run s':>8} {'re-run launches':>15}")
    for n, seed in cases:
        for k in SLOTS:
            r = run(n, seed, k)
            print(f"{r['n']:>3} {r['seed']:>4} {r['k']:>2} {r['evals']:>5} {r['rounds']:>6} {r['bound']:>5} "
                  f"{r['skipped']:>7} {str(r['found']):>5} {str(r['confirmed']):>9} {r['wall']:>6.1f} "
                  f"{r['launches']:>8} {r['rerun']:>8.1f} {r['rerun_launches']:>15}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
