"""A/A: how often identical sides read *different*, and whether one side reads faster, with
alternating rounds and with both sides at once, unwindowed and over a window, on a machine
loaded on purpose.

    python benchmarks/bench_aa.py [RUNS] [--alpha A] [--burners N] [--window S] [--measure M]
    python benchmarks/bench_aa.py --pool DIR [DIR ...] [--measure M] [--window S]

Base and candidate are two commits of the reference server that differ in a changelog only,
so every *different* is a false one. One run is one identical throughput configuration (its own
pair of servers; one configuration at a time) with seven paired rounds at two concurrency
levels and no floor, so every metric is judged by its test alone (the two deciding levels share
alpha, as compare.py splits it). RUNS runs per placement mode and per measurement (to the end of
every request; over a window of S seconds that closes in the middle of short requests sent back to
back, where a late closing thread once clipped ends below starts). N CPU burners (busy loops, one
process each) run beside it throughout: on a shared machine the load is what makes a side bias.

Per placement mode and measurement it prints the false-*different* rate (should stay at or below
alpha) and the side bias: the share of runs whose deciding level (the highest) read the
candidate faster (its paired median difference above zero), with a 95% Wilson interval; 50% is
no bias. Each run's results.json (with the recorded placement seed) is kept under
DETCHECK_AA_OUT when set; `--pool` prints the figures of the runs kept under several such
folders together (a mode's 64 runs made in parts, or a part cut short: as far as it got).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from _common import scratch, throughput_suite, two_commits, wilson_interval
from harness.result_files import read_run
from harness.results import RunResult, Status
from harness.revisions import Revision
from harness.run import RunRequest, execute
from harness.pipeline.slots import cpu_slots

MODES = {"alternating": False, "at once": True}
LEVELS = (1, 2)
ROUNDS = 7
BURN = "while True: pass"
# A windowed level's clients send this many requests back to back: far more than fit in the window.
WINDOWED_REQUESTS_PER_CLIENT = 1000


@dataclass(frozen=True)
class Measurement:
    name: str
    window_s: float | None  # None: every request to its end


@dataclass(frozen=True)
class Figures:
    runs: int
    different: int
    errors: int
    # Runs with a cell that is a finding (a late or ignored abort, a non-positive duration): each
    # is also a false *different*; their reasons' openings, so a printout says which.
    findings: tuple[str, ...]
    candidate_faster: int  # runs whose deciding level read the candidate faster
    judged: int  # runs with a deciding effect (not an error)
    wall_s: float

    @property
    def different_rate(self) -> float:
        return self.different / self.runs if self.runs else float("nan")


DECIDING = f"tok_s_c{max(LEVELS)}"


def figures_of(results: list[RunResult], wall_s: float) -> Figures:
    """The A/A figures of one or more runs of one (measurement, placement mode): every
    configuration is one A/A run."""
    comps = [c for r in results for c in r.comparisons if c.probe == "throughput"]
    found = [cell for r in results for cell in r.cells if cell.status == Status.FINDING]
    effects = [c.metrics[DECIDING].effect for c in comps if DECIDING in c.metrics]
    return Figures(runs=len(comps), different=sum(c.verdict == "different" for c in comps),
                   errors=sum(c.verdict == "error" for c in comps),
                   findings=tuple(f"{cell.config} {cell.role.value}: {cell.reason[:160]}" for cell in found),
                   candidate_faster=sum(e > 0 for e in effects), judged=len(effects), wall_s=wall_s)


def stem(measurement: Measurement, at_once: bool) -> str:
    """The folder a (measurement, mode)'s run is kept in under DETCHECK_AA_OUT."""
    return f"aa-{measurement.name}-{'once' if at_once else 'alt'}"


def suite_text(runs: int, at_once: bool, alpha: float, window_s: float | None = None) -> str:
    head = throughput_suite("aa", LEVELS, ROUNDS, at_once) + (
        f"alpha = {alpha}\nverdict_metrics = {[f'tok_s_c{c}' for c in LEVELS]}\n")
    if window_s is not None:
        head += f"window_s = {window_s}\nrequests_per_client = {WINDOWED_REQUESTS_PER_CLIENT}\n"
    return head + "".join(f'[[config]]\nname = "aa-{i}"\nprobes = ["throughput"]\n' for i in range(runs))


@contextlib.contextmanager
def burners(count: int) -> Iterator[None]:
    """`count` busy-loop processes beside the benchmark while it runs, each ended by its pid."""
    procs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


def measure(runs: int, alpha: float, measurements: list[Measurement]) -> Iterator[tuple[str, str, Figures]]:
    """Each (measurement, placement mode)'s figures as soon as its runs are done: a long
    benchmark cut short still printed what it finished."""
    keep = os.environ.get("DETCHECK_AA_OUT")
    with scratch() as tmp:
        repo, base, cand = two_commits(tmp)
        for measurement in measurements:
            for mode, at_once in MODES.items():
                name = stem(measurement, at_once)
                suite = tmp / f"{name}.toml"
                suite.write_text(suite_text(runs, at_once, alpha, measurement.window_s))
                out = Path(keep) / name if keep else tmp / name
                req = RunRequest(suite_path=suite, target="refserver", base=Revision.resolve(repo, base),
                                 candidate=Revision.resolve(repo, cand), out_dir=out, store_root=tmp / "store",
                                 slots=cpu_slots(2))
                t0 = time.perf_counter()
                result = execute(req)
                yield measurement.name, mode, figures_of([result], time.perf_counter() - t0)


def pooled(kept: list[Path], measurements: list[Measurement]) -> Iterator[tuple[str, str, Figures]]:
    """The figures of runs kept under several DETCHECK_AA_OUT folders (the 64 runs of a mode
    made in parts), pooled per (measurement, mode); each part's results.json as far as it got."""
    for measurement in measurements:
        for mode, at_once in MODES.items():
            files = [d / stem(measurement, at_once) / "results.json" for d in kept]
            results = [read_run(f) for f in files if f.exists()]
            if results:
                yield measurement.name, mode, figures_of(results, wall_s=float("nan"))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=64, help="A/A runs per placement mode and measurement")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--burners", type=int, default=2, help="CPU burner processes beside it")
    # 0.5 s was too short there: under the burners most cells had no token streamed within it (vacuous)
    parser.add_argument("--window", type=float, default=1.0, help="the windowed measurement's window_s")
    parser.add_argument("--measure", choices=("both", "unwindowed", "windowed"), default="both")
    parser.add_argument("--pool", type=Path, nargs="+", metavar="DIR",
                        help="measure nothing: pool the runs kept under these DETCHECK_AA_OUT folders")
    args = parser.parse_args(argv)
    measurements = [m for m in (Measurement("unwindowed", None), Measurement(f"window {args.window:g} s", args.window))
                    if args.measure in ("both", "windowed" if m.window_s else "unwindowed")]
    if args.pool:
        print(f"A/A runs kept under {', '.join(map(str, args.pool))}, pooled per placement mode and measurement")
        for measurement, mode, f in pooled(args.pool, measurements):
            show(measurement, mode, f, args.alpha)
        return
    print(f"A/A on the reference server: {args.runs} runs per placement mode and measurement, "
          f"{ROUNDS} paired rounds, levels {list(LEVELS)} (c{max(LEVELS)} for the side bias), no floor, "
          f"alpha {args.alpha}, {args.burners} CPU burners beside it ({os.cpu_count()} cores)", flush=True)
    with burners(args.burners):
        for measurement, mode, f in measure(args.runs, args.alpha, measurements):
            show(measurement, mode, f, args.alpha)


def show(measurement: str, mode: str, f: Figures, alpha: float) -> None:
    low, high = wilson_interval(f.candidate_faster, f.judged)
    share = f.candidate_faster / f.judged if f.judged else float("nan")
    # Judged on the rate's interval, not its point: 4 of 64 is 6.2% and still consistent with 5%.
    rate_low, rate_high = wilson_interval(f.different, f.runs)
    against = "ABOVE alpha" if rate_low > alpha else ("below alpha" if rate_high < alpha else "alpha inside")
    print(f"  {measurement:12s} {mode:12s} false different {f.different}/{f.runs} ({f.different_rate:.1%}, "
          f"95% CI {rate_low:.1%}-{rate_high:.1%}, {against}); errors {f.errors}; "
          f"candidate faster in {f.candidate_faster}/{f.judged} ({share:.0%}, 95% CI {low:.0%}-{high:.0%})"
          + ("" if math.isnan(f.wall_s) else f"; {f.wall_s:.0f} s"), flush=True)
    print(f"  {'':12s} {'':12s} findings {len(f.findings)}" + "".join(f"\n      {line}" for line in f.findings),
          flush=True)

if __name__ == "__main__":
    main(sys.argv[1:])
