"""A/A: how often identical sides read *different*, with alternating rounds and with both
sides at once.

    python benchmarks/bench_aa.py [CONFIGS] [--alpha A]

Base and candidate are two commits of the reference server that differ in a changelog only,
so every *different* is a false one. One run per mode measures CONFIGS identical throughput
configurations (each its own pair of servers, one configuration at a time), each with seven
paired rounds at two concurrency levels and no floor, so every metric is judged by its test
alone (the two deciding levels share alpha, as compare.py splits it): the false-*different*
rate per configuration (either level) should stay at or below alpha. The signed median effect over all comparisons shows a side
bias (the base faster or slower by placement) that a rate alone can hide. Each run's
results.json (with the recorded placement seed) is kept under DETCHECK_AA_OUT when set.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from _common import ROOT, scratch, two_commits
from harness.revisions import Revision
from harness.run import RunRequest, execute
from harness.schedule import cpu_slots

MODES = {"alternating": False, "at once": True}
LEVELS = (1, 2)


def suite_text(configs: int, at_once: bool, alpha: float) -> str:
    head = f"""name = "aa"
[models]
refserver = "{ROOT / 'fixtures/refmodels/hybrid'}"
[server]
args = ["--random-seed", "1"]
[workload]
prompts = 2
prompt_len = [16, 16]
output_len = 24
[probe.throughput]
concurrency = {list(LEVELS)}
repeats = 7
warmup = 1
alpha = {alpha}
sides_at_once = {str(at_once).lower()}
verdict_metrics = {[f"tok_s_c{c}" for c in LEVELS]}
"""
    return head + "".join(f'[[config]]\nname = "aa-{i}"\nprobes = ["throughput"]\n' for i in range(configs))


def measure(configs: int, alpha: float) -> dict[str, dict]:
    figures = {}
    keep = os.environ.get("DETCHECK_AA_OUT")
    with scratch() as tmp:
        repo, base, cand = two_commits(tmp)
        for mode, at_once in MODES.items():
            suite = tmp / f"aa-{'once' if at_once else 'alt'}.toml"
            suite.write_text(suite_text(configs, at_once, alpha))
            out = Path(keep) / suite.stem if keep else tmp / suite.stem
            req = RunRequest(suite_path=suite, target="refserver", base=Revision.resolve(repo, base),
                             candidate=Revision.resolve(repo, cand), out_dir=out, store_root=tmp / "store",
                             slots=cpu_slots(2))
            t0 = time.perf_counter()
            result = execute(req)
            wall = time.perf_counter() - t0
            comps = [c for c in result.comparisons if c.probe == "throughput"]
            metrics = [m for c in comps for name, m in c.metrics.items() if name.startswith("tok_s_")]
            # relative effect: candidate over base, per metric comparison
            relative = [m.effect / m.base.median for m in metrics if m.base.median]
            figures[mode] = {
                "configs": len(comps),
                "different": sum(c.verdict == "different" for c in comps),
                "errors": sum(c.verdict == "error" for c in comps),
                "metrics": len(metrics),
                "metrics_different": sum(m.verdict == "different" for m in metrics),
                "median_relative_effect": statistics.median(relative) if relative else float("nan"),
                "candidate_faster": sum(r > 0 for r in relative),
                "wall_s": wall,
                "placement_seeds": sorted({str(c.facts.get("placement_seed")) for c in result.cells
                                           if c.facts.get("placement_seed") is not None}),
            }
    return figures


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="?", type=int, default=20, help="A/A configurations per mode")
    parser.add_argument("--alpha", type=float, default=0.05)
    args = parser.parse_args(argv)
    print(f"A/A on the reference server: {args.configs} identical configurations per mode, "
          f"7 paired rounds, levels {list(LEVELS)}, no floor, alpha {args.alpha}")
    for mode, f in measure(args.configs, args.alpha).items():
        rate = f["different"] / f["configs"] if f["configs"] else float("nan")
        metric_rate = f["metrics_different"] / f["metrics"] if f["metrics"] else float("nan")
        print(f"  {mode:12s} false different {f['different']}/{f['configs']} configurations ({rate:.1%}), "
              f"{f['metrics_different']}/{f['metrics']} metrics ({metric_rate:.1%}); errors {f['errors']}; "
              f"median effect {f['median_relative_effect']:+.2%}, candidate faster in "
              f"{f['candidate_faster']}/{f['metrics']}; {f['wall_s']:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
