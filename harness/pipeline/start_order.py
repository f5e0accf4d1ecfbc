"""Which waiting job of a slot pool starts next.

A pool with fewer slots than jobs ends no sooner than its last-started long job: a job of
300 s that gets its slot at 240 s makes a 540 s run. So the pool starts the longest jobs first
(longest-processing-time order), their lengths read from earlier runs' records (`--order-from`:
the launches' start and stop times in results.json). A job no earlier run timed goes first (it
may be long); with no times at all the order is the plan's.

`first_per_model` staggers the starts by model: the first server of each model starts at once,
and the model's other servers once it is up (or has failed). Every SGLang server JIT-compiles
its model's Triton kernels on a machine whose kernel cache is cold, and servers started
together each compile all of them (16 CPU cores, 48 servers: the compiles, not the GPU, set the
pace); started after the first is up, they read its compiled kernels from the on-disk cache.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from harness.errors import UsageError
from harness.result_files import read_run, run_files
from harness.results import Role

JobKey = tuple[str, str, str]  # (suite name, configuration, role)


@dataclass(frozen=True)
class JobTimes:
    """Seconds from launch to teardown of each job of earlier runs."""

    seconds: Mapping[JobKey, float] = field(default_factory=dict)
    sources: tuple[str, ...] = ()  # the run directories or files they were read from

    def expected(self, suite: str, config: str, roles: Iterable[Role]) -> float | None:
        """A unit's length: its longest job's (both servers of an interleaved unit are up
        together); None when no earlier run timed any of them."""
        known = [s for role in roles if (s := self.seconds.get((suite, config, role.value))) is not None]
        return max(known, default=None)


def read_job_times(paths: Iterable[Path]) -> JobTimes:
    """Job times from results.json (or .gz) files, run directories, and folders of run
    directories (a matrix run's `--out`: one per suite). A job timed twice keeps its longer time."""
    seconds: dict[JobKey, float] = {}
    sources = []
    for path in paths:
        runs = [path] if path.is_file() or run_files(path) else sorted(
            d for d in (path.iterdir() if path.is_dir() else ()) if d.is_dir() and run_files(d))
        if not runs:
            raise UsageError(f"--order-from {path}: no results.json here or in its folders")
        for run_path in runs:
            result = read_run(run_path)
            for launch in result.launches:
                if launch.started_at is None or launch.ended_at is None:
                    continue
                key = (result.suite, launch.config, launch.role.value)
                seconds[key] = max(seconds.get(key, 0.0), launch.ended_at - launch.started_at)
            sources.append(str(run_path))
    return JobTimes(seconds, tuple(sources))


@dataclass(frozen=True)
class StartOrder:
    """How a pool picks the next job: longest first by `times`; `first_per_model` as above."""

    times: JobTimes = JobTimes()
    first_per_model: bool = False

    def to_dict(self) -> dict:
        return {"order_from": list(self.times.sources), "first_per_model": self.first_per_model}


def longest_first(items: list, expected: list[float | None]) -> list:
    """`items` by their expected length, longest first; untimed ones before every timed one,
    ties in their given order (sorted() is stable)."""
    return [item for _, item in sorted(zip(expected, items), key=lambda pair: (pair[0] is not None, -(pair[0] or 0)))]


class ModelGates:
    """Thread-safe: whether a queued job may start under `first_per_model`. The first queued
    job of a model is its leader and starts at once; the model's others wait until `opened`
    is called for it (the leader's launch ended, up or not, or its job ended without one)."""

    def __init__(self, models: list[str]):
        self._leaders: dict[str, int] = {}
        for position, model in enumerate(models):
            self._leaders.setdefault(model, position)
        self._open: set[str] = set()
        self._lock = threading.Lock()

    def may_start(self, position: int, model: str) -> bool:
        with self._lock:
            return self._leaders[model] == position or model in self._open

    def opened(self, model: str) -> None:
        with self._lock:
            self._open.add(model)

    @property
    def models(self) -> int:
        return len(self._leaders)
