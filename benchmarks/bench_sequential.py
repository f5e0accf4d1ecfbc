"""The sequential design (harness/sequential.py) on real A/A rounds: its false-*different* rate
per placement, and the rounds it takes to a verdict for identical sides and for a 40% slowdown.

    python benchmarks/bench_sequential.py [RUNS] [--pool ROUNDS] [--repeats R] [--max-looks K]

Per placement mode (alternating rounds, both sides at once) one real run of the reference
server measures a pool of ROUNDS paired throughput rounds (concurrency 1) of two commits that
differ in a changelog only. Then RUNS sequential comparisons each draw their rounds from that
pool (R rounds a look, drawn with replacement by a seeded generator, each round keeping its
two sides together) and are judged by the pipeline's own code (`compare.compare_cells`, every
look at its share of alpha, a 10% floor) until a look decides or K looks are spent. A/A: every
*different* is false, and its rate should stay at or below alpha. The slowdown: the same rounds
with the candidate's tok/s times 0.6, so its effect is exactly 40% on real noise; every verdict
but *different* is a miss. Printed: verdict counts, the false-*different* rate with its 95%
Wilson interval, and the mean rounds per side at the verdict.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from _common import scratch, throughput_suite, two_commits, wilson_interval
from harness.compare import compare_cells
from harness.probes import PROBES
from harness.results import CellResult, Metric, RevisionInfo, Role, Status
from harness.revisions import Revision
from harness.run import RunRequest, execute
from harness.pipeline.slots import cpu_slots
from harness.sequential import Look, LookState
from harness.verdict_stats import Kind, Verdict

MODES = {"alternating": False, "at once": True}
METRIC = "tok_s_c1"
FLOOR_REL = 0.1
SLOWDOWN = 0.6


def pool_suite(rounds: int, at_once: bool) -> str:
    return throughput_suite("sequential-pool", (1,), rounds, at_once) + \
        'max_looks = 1\n[[config]]\nname = "pool"\nprobes = ["throughput"]\n'


def measure_pool(tmp: Path, rounds: int, at_once: bool) -> tuple[list[float], list[float], float]:
    """Each side's tok/s per round of one real A/A run, and its wall time."""
    repo, base, cand = two_commits(tmp / ("once" if at_once else "alt"))
    suite = tmp / f"pool-{'once' if at_once else 'alt'}.toml"
    suite.write_text(pool_suite(rounds, at_once))
    req = RunRequest(suite_path=suite, target="refserver", base=Revision.resolve(repo, base),
                     candidate=Revision.resolve(repo, cand), out_dir=tmp / suite.stem, store_root=tmp / "store",
                     slots=cpu_slots(2))
    t0 = time.perf_counter()
    result = execute(req)
    sides = {c.role: c.metric(METRIC).values for c in result.cells if c.status == Status.OK}
    if set(sides) != {Role.BASE, Role.CANDIDATE}:
        raise SystemExit(f"the pool run failed: {[c.reason for c in result.cells]}")
    return list(sides[Role.BASE]), list(sides[Role.CANDIDATE]), time.perf_counter() - t0


def cell(role: Role, values: list[float], state: LookState) -> CellResult:
    metric = Metric(METRIC, Kind.NOISY, tuple(values), unit="tok/s", better="higher", paired=True)
    return CellResult("pool", "throughput", role, RevisionInfo("x", "0" * 40), Status.OK, "f", "w",
                      metrics=(metric,), facts={"sequential": state.to_dict()})


def sequential_run(base: list[float], cand: list[float], scale: float, seed: int, repeats: int,
                   max_looks: int, params: dict) -> tuple[Verdict, int]:
    """One sequential comparison over rounds drawn from the pool: its verdict and rounds per side."""
    rng = random.Random(seed)
    b, c, earlier = [], [], []
    for look in range(1, max_looks + 1):
        for i in (rng.randrange(len(base)) for _ in range(repeats)):
            b.append(base[i])
            c.append(cand[i] * scale)
        state = LookState(look, max_looks, tuple(earlier))
        comp = compare_cells("pool", "throughput", cell(Role.BASE, b, state), cell(Role.CANDIDATE, c, state), params)
        if comp.verdict != Verdict.UNKNOWN:
            return comp.verdict, len(b)
        earlier.append(Look(look, len(b), comp.verdict.value, state.alpha(params["alpha"])))
    return Verdict.UNKNOWN, len(b)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=64, help="sequential comparisons per mode and case")
    parser.add_argument("--pool", type=int, default=48, help="real paired rounds measured per mode")
    parser.add_argument("--repeats", type=int, default=6, help="rounds per look (throughput's default)")
    parser.add_argument("--max-looks", type=int, default=3)
    args = parser.parse_args(argv)
    params = PROBES["throughput"].validate({"floor_rel": FLOOR_REL, "max_looks": args.max_looks,
                                            "repeats": args.repeats, "concurrency": [1]}, "bench")
    print(f"sequential design on the reference server: {args.runs} comparisons per mode and case, "
          f"{args.repeats} rounds a look, at most {args.max_looks} looks, floor {FLOOR_REL:.0%}, "
          f"alpha {params['alpha']}, rounds drawn from {args.pool} real A/A rounds per mode")
    with scratch() as tmp:
        for mode, at_once in MODES.items():
            base, cand, wall = measure_pool(tmp, args.pool, at_once)
            spread = statistics.median(cand) / statistics.median(base) - 1
            print(f"  {mode}: pool of {len(base)} rounds in {wall:.0f} s (candidate median {spread:+.1%} "
                  f"against the base)")
            for case, scale in (("A/A", 1.0), ("40% slower", SLOWDOWN)):
                outcomes = [sequential_run(base, cand, scale, seed, args.repeats, args.max_looks, params)
                            for seed in range(args.runs)]
                counts = {v: sum(o == v for o, _ in outcomes) for v in (Verdict.SAME, Verdict.DIFFERENT, Verdict.UNKNOWN)}
                rounds = statistics.mean(n for _, n in outcomes)
                line = (f"    {case:10s} same {counts[Verdict.SAME]}, different {counts[Verdict.DIFFERENT]}, "
                        f"unknown {counts[Verdict.UNKNOWN]} of {args.runs}; mean rounds per side at the verdict "
                        f"{rounds:.1f}")
                if scale == 1.0:
                    low, high = wilson_interval(counts[Verdict.DIFFERENT], args.runs)
                    line += (f"; false different {counts[Verdict.DIFFERENT] / args.runs:.1%} "
                             f"(95% CI [{low:.1%}, {high:.1%}], alpha {params['alpha']})")
                print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
