"""What the benchmark scripts share: a throwaway cache and a two-commit fixture repo."""

from __future__ import annotations

import contextlib
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
