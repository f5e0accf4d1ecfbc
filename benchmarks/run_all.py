"""`nox -s bench`: every benchmark in turn, figures printed (nothing is asserted).

    python benchmarks/run_all.py [quick]     quick: the default suite, one bisect, 4 A/A configurations
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_aa  # noqa: E402
import bench_bisect  # noqa: E402
import bench_kl  # noqa: E402
import bench_pipeline  # noqa: E402
import bench_schedule  # noqa: E402
import bench_sequential  # noqa: E402
from _common import ROOT  # noqa: E402

if __name__ == "__main__":
    quick = sys.argv[1:] == ["quick"]
    bench_kl.main([])
    print()
    bench_pipeline.main([str(ROOT / "suites" / "default.toml")] if quick else [])
    print()
    bench_schedule.main([str(ROOT / "suites" / "default.toml")] if quick else [])
    print()
    bench_bisect.main(["17:0"] if quick else [])
    print()
    bench_aa.main(["4"] if quick else [])
    print()
    bench_sequential.main(["8", "--pool", "12"] if quick else [])
