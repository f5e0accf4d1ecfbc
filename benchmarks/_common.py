"""What the benchmark scripts share: a throwaway cache and a two-commit fixture repo."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.fixture_repo import FixtureRepo  # noqa: E402


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    """A temp dir that is also the cache (worktrees, help texts, stores) while it exists."""
    old = os.environ.get("DETCHECK_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="detcheck-bench-") as tmp:
        os.environ["DETCHECK_CACHE_DIR"] = str(Path(tmp, "cache"))
        try:
            yield Path(tmp)
        finally:
            if old is None:
                os.environ.pop("DETCHECK_CACHE_DIR", None)
            else:
                os.environ["DETCHECK_CACHE_DIR"] = old


def two_commits(root: Path) -> tuple[Path, str, str]:
    """A reference-server repo: base, and a candidate that changes nothing the server runs."""
    repo = FixtureRepo.create(root / "repo")
    base = repo.head()
    return repo.path, base, repo.note("changelog only")


def throughput_suite(name: str, levels: tuple[int, ...], repeats: int, at_once: bool) -> str:
    """The head of the A/A benchmarks' suites: the reference server's hybrid model, two short
    prompts, a throughput table at `levels` (more of its keys may follow; then the configurations)."""
    return f"""name = "{name}"
[models]
refserver = "{ROOT / 'fixtures/refmodels/hybrid'}"
[server]
args = ["--random-seed", "1"]
[workload]
prompts = 2
prompt_len = [16, 16]
output_len = 24
[probe.throughput]
concurrency = {list(levels)}
repeats = {repeats}
warmup = 1
sides_at_once = {str(at_once).lower()}
"""


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a binomial share (sensible at 0 and n successes too)."""
    if n == 0:
        return float("nan"), float("nan")
    share = successes / n
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def covered(spans: list[tuple[float, float]]) -> float:
    """Seconds inside at least one of the (start, end) spans: their union's length."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return total


def best_of(n: int, fn: Callable[[], object]) -> float:
    """The fastest of n timed calls, in seconds."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)
