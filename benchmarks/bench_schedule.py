"""Server slots on the CPU reference server: a suite's wall time one job at a time, with the
default slots, and against its slowest single job.

For each suite, two runs with empty stores in one cache whose worktrees, `--help` texts and
interpreter facts are read beforehand (as after any earlier run), so that the wall time is the
schedule's: one slot (sequential) and the default slots (half the CPU cores, or --slots N).
The slowest job is
the longest launch + probes + teardown of one server in the one-slot run (from the launches'
recorded start and end times): no schedule can beat it, so wall / slowest job says how close
the concurrent run comes (goal: 1.3 or less, with enough slots for every job).

Then the same figures for the committed GPU runs (results/h200/validate/*, pools-readahead/,
seed/window-run/ and seed/rounds-run/, and validate-pool/ and pool-order/'s three runs each as
one pool over its suites, read, not run), and for pool-order/ the host's CPU (busy core-seconds
from its monitor.txt, and the wall they allow at best):
their wall (results.json's started_at → finished_at), their slowest job, the sum of their jobs
(what one slot would take), and the harness's share of the wall: the time no server of the run
was up (checkout, `--help`, writing results).

    python benchmarks/bench_schedule.py [--slots N] [SUITE ...]   (default: every suites/*.toml)
    python benchmarks/bench_schedule.py --stored                  (the committed GPU runs alone)
"""

from __future__ import annotations

import dataclasses
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from _common import ROOT, covered, scratch, two_commits
from harness.capabilities import revision_capabilities
from harness.result_files import read_run
from harness.metadata import revision_interpreter_metadata
from harness.results import RunResult
from harness.revisions import Revision
from harness.run import RunRequest, execute
from harness.pipeline.slots import cpu_slots, default_slot_count
from harness.targets import get_target


def warm_cache(req: RunRequest) -> None:
    """Worktrees, `--help` and interpreter facts of both revisions, read once before timing."""
    target = get_target(req.target)
    for revision in (req.base, req.candidate):
        worktree = revision.checkout()
        revision_capabilities(target, revision.sha, worktree, timeout_s=240)
        revision_interpreter_metadata(target, revision.sha, worktree)


def timed_run(req: RunRequest, slots: int, label: str) -> tuple[float, RunResult]:
    """A base-vs-candidate run at `slots`, with a store and run directory of its own (`label`:
    the two runs never share a store, even at the same slot count)."""
    req = dataclasses.replace(req, slots=cpu_slots(slots), out_dir=req.out_dir / label,
                              store_root=req.store_root / label)
    t0 = time.perf_counter()
    result = execute(req)
    return time.perf_counter() - t0, result


def slowest_job(result: RunResult) -> float:
    return max((l.ended_at - l.started_at for l in result.launches
                if l.started_at is not None and l.ended_at is not None), default=0.0)


def measure(suite: Path, slots: int) -> dict:
    with scratch() as tmp:
        repo, base, cand = two_commits(tmp)
        req = RunRequest(suite_path=suite, target="refserver", base=Revision.resolve(repo, base),
                         candidate=Revision.resolve(repo, cand), out_dir=tmp / "run", store_root=tmp / "store")
        warm_cache(req)
        sequential_wall, sequential = timed_run(req, 1, "sequential")
        wall, concurrent = timed_run(req, slots, "concurrent")
    slowest = slowest_job(sequential)
    same = [c.verdict for c in sequential.comparisons] == [c.verdict for c in concurrent.comparisons]
    return {"suite": suite.stem, "jobs": len(sequential.launches), "slots": slots, "wall_1": sequential_wall,
            "wall_n": wall, "slowest": slowest, "ratio": wall / slowest if slowest else float("nan"),
            "same_verdicts": same}


def server_time(launches: list) -> float:
    """Seconds in which at least one of the servers was up (the union of the jobs)."""
    return covered([(l.started_at, l.ended_at) for l in launches
                    if l.started_at is not None and l.ended_at is not None])


def stored(run_dirs: list[Path], name: str) -> dict:
    """The figures of one run, or of a matrix entry's suites run in one pool (one folder per
    suite): the wall from the first start to the last finish, over every suite's jobs."""
    results = [read_run(d) for d in run_dirs]
    when = [datetime.strptime(r.metadata[k], "%Y-%m-%dT%H:%M:%SZ")
            for r in results for k in ("started_at", "finished_at")]
    wall = (max(when) - min(when)).total_seconds()
    launches = [l for r in results for l in r.launches]
    jobs = [l.ended_at - l.started_at for l in launches if l.started_at is not None and l.ended_at is not None]
    return {"run": name, "jobs": len(jobs), "slots": results[0].metadata.get("slots"), "wall": wall,
            "slowest": max(map(slowest_job, results)), "sum": sum(jobs),
            "harness": max(0.0, wall - server_time(launches)) / wall}


def print_stored(runs: list[tuple[list[Path], str]]) -> None:
    print("\ncommitted GPU runs (read from results.json: one H200; the release pair 0.5.16 vs 0.5.17, the seed\n"
          "runs 0.5.16 vs 0.5.16 + the DFLASH SWA-eviction patch)")
    print(f"{'run':<32} {'jobs':>4} {'slots':>5} {'wall s':>7} {'slowest job s':>13} {'wall/slowest':>12} "
          f"{'sum of jobs s':>13} {'vs one slot':>11} {'harness share':>13}")
    for r in (stored(dirs, name) for dirs, name in runs):
        print(f"{r['run']:<32} {r['jobs']:>4} {r['slots']:>5} {r['wall']:>7.0f} {r['slowest']:>13.1f} "
              f"{r['wall'] / r['slowest']:>12.2f} {r['sum']:>13.0f} {r['sum'] / r['wall']:>10.1f}× {r['harness']:>13.1%}")


def host_cpu(monitor: Path, run_dirs: list[Path]) -> dict:
    """The host's busy core-seconds over a pool run's launch windows, from cpu_monitor.py's lines
    (`busy N%` each interval, `# cores N` first), and what they make the fastest possible wall:
    that much CPU on every core at once."""
    lines = monitor.read_text().splitlines()
    cores = int(lines[0].split()[2])
    launches = [l for d in run_dirs for l in read_run(d).launches]
    start, end = min(l.started_at for l in launches), max(l.ended_at for l in launches)
    day = datetime.fromtimestamp(start, timezone.utc).date()  # the monitor's clock reads UTC
    samples = [(datetime.combine(day, datetime.strptime(line.split()[0], "%H:%M:%S").time(), timezone.utc).timestamp(),
                int(line.split("busy ")[1].split("%")[0])) for line in lines[1:]]
    used = sum(busy / 100 * cores * (t - prev) for (prev, _), (t, busy) in zip(samples, samples[1:])
               if start <= t <= end)
    return {"launches": len(launches), "cpu_s": used, "per_launch": used / len(launches), "cores": cores,
            "floor_s": used / cores}


def print_host_cpu(runs: list[tuple[list[Path], str]]) -> None:
    print("\nhost CPU of the pool runs (cpu_monitor.py's busy share over their launch windows)")
    print(f"{'run':<32} {'launches':>8} {'core-s':>7} {'per launch':>10} {'all cores busy: wall ≥':>22}")
    for dirs, name in runs:
        r = host_cpu(dirs[0].parent.parent / "monitor.txt", dirs)
        print(f"{name:<32} {r['launches']:>8} {r['cpu_s']:>7.0f} {r['per_launch']:>10.0f} "
              f"{r['floor_s']:>20.0f} s")


def pool_order_runs() -> list[tuple[list[Path], str]]:
    """The pool runs of results/h200/pool-order/ (one folder per start order, one per suite in it)."""
    root = ROOT / "results" / "h200" / "pool-order"
    return [([p for p in sorted(run.iterdir()) if p.is_dir()], f"pool-order/{run.name}")
            for run in sorted(root.iterdir()) if run.is_dir()] if root.is_dir() else []


def committed_runs() -> list[tuple[list[Path], str]]:
    """The committed GPU runs bench_schedule reads: each suite of validate/ (run in turn), the
    single runs, and validate-pool/ and pool-order/'s runs as one pool over their suites' folders."""
    h200 = ROOT / "results" / "h200"
    pooled = [([p for p in sorted(h200.joinpath(d).iterdir()) if p.is_dir() and p.name != "logs"], f"{d} (one pool)")
              for d in ("validate-pool",) if h200.joinpath(d).is_dir()] + pool_order_runs()
    return [*(([p], p.name) for p in sorted((h200 / "validate").iterdir()) if p.is_dir()),
            *(([h200.joinpath(*d)], d[-1]) for d in (("pools-readahead",), ("seed", "window-run"),
                                                     ("seed", "rounds-run"))), *pooled]


def main(argv: list[str]) -> None:
    if argv == ["--stored"]:  # read, not run: no CPU measurement first
        print_stored(committed_runs())
        print_host_cpu(pool_order_runs())
        return
    # The default slots, but at least two: at one slot there is no schedule to measure.
    slots = max(2, default_slot_count("refserver"))
    if argv[:1] == ["--slots"]:
        slots, argv = int(argv[1]), argv[2:]
    suites = [Path(a).resolve() for a in argv] or sorted((ROOT / "suites").glob("*.toml"))
    print(f"server slots: wall one job at a time vs {slots} slots, and vs the slowest job "
          f"(CPU reference server, base vs candidate)")
    print(f"{'suite':<14} {'jobs':>4} {'slots':>5} {'wall@1 s':>8} {'wall@N s':>8} {'speed-up':>8} "
          f"{'slowest job s':>13} {'wall@N/slowest':>14}  verdicts as @1")
    for suite in suites:
        r = measure(suite, slots)
        print(f"{r['suite']:<14} {r['jobs']:>4} {r['slots']:>5} {r['wall_1']:>8.1f} {r['wall_n']:>8.1f} "
              f"{r['wall_1'] / r['wall_n']:>7.1f}× {r['slowest']:>13.1f} {r['ratio']:>14.2f}  "
              f"{'yes' if r['same_verdicts'] else 'NO'}", flush=True)
    print_stored(committed_runs())

if __name__ == "__main__":
    main(sys.argv[1:])
