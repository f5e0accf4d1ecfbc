"""How long a matrix entry, or one of its suites, takes: its `est_time`, from stored runs.

SGLang's CI splits each suite's tests over runners by their `est_time` (longest-processing-time
partitions); a matrix entry here is such a job. An entry's estimate is declared (`est_time` in
matrix.toml, seconds) or read from earlier runs of it (its `order_from`): the wall time their
servers were up, i.e. the union of the launches' windows (launch to teardown), so that suites
that ran in one pool count once and runs made at other times add up. A suite's estimate is
its own runs' union. Nothing timed: None.

`lpt_partition` packs items (an entry's suites, or entries sharing a runner label) into n
bins, each next-longest item to the least-loaded bin.

Standard library only (and `bounded`): noxfile.py lists the matrix with these before anything
is installed, so the result files are read as plain JSON, never through `results`.
"""

from __future__ import annotations

import functools
import gzip
import json
import lzma
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence, TypeVar

from harness import bounded
from harness.errors import UsageError

RESULT_FILE_NAMES = ("results.json", "results.json.gz", "results.json.xz")  # as result_files names them
# What an untimed item is taken to last where others are timed: their mean; where none is, this.
DEFAULT_EST_S = 600.0

T = TypeVar("T")


@dataclass(frozen=True)
class RunTiming:
    """What an estimate reads of one results file: its suite's name and its launches' windows."""

    file: Path
    suite: str
    windows: tuple[tuple[float, float], ...]


def run_timings(paths: Iterable[Path]) -> list[RunTiming]:
    """Each result file under `paths` (a results file, a run directory, or a folder of run
    directories: a matrix run's `--out`), timed. A file that cannot be read is UsageError."""
    found: list[RunTiming] = []
    for path in paths:
        files = [path] if path.is_file() else _files(path) or [
            f for d in (sorted(path.iterdir()) if path.is_dir() else ()) if d.is_dir() for f in _files(d)]
        for file in files:
            try:
                stat = file.stat()
                found.append(_timing(file, stat.st_mtime_ns, stat.st_size))
            except (OSError, ValueError, EOFError, gzip.BadGzipFile, lzma.LZMAError, bounded.TooLarge) as exc:
                raise UsageError(f"est_time: {file}: not a readable results file ({exc})") from None
    return found


@functools.lru_cache(maxsize=256)
def _timing(file: Path, mtime_ns: int, size: int) -> RunTiming:
    """One results file parsed once per process while it is unchanged (mtime and size are the
    key): a matrix's jobs read each entry's runs for the entry and again for each suite, and a
    stored run is megabytes of JSON."""
    document = json.loads(bounded.read_file(file, bounded.RESULT_DOCUMENT).decode())
    return RunTiming(file, str(document.get("suite", "")), tuple(windows(document)))


def _files(directory: Path) -> list[Path]:
    """One results file of a run directory (the first name that exists): its copies are alike."""
    return next(([directory / n] for n in RESULT_FILE_NAMES if (directory / n).is_file()), [])


def windows(document: dict) -> list[tuple[float, float]]:
    """The launches' (started_at, ended_at) of one results document; untimed ones left out."""
    out = []
    for launch in document.get("launches") or ():
        start, end = launch.get("started_at"), launch.get("ended_at")
        if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end >= start:
            out.append((float(start), float(end)))
    return out


def union_seconds(spans: Iterable[tuple[float, float]]) -> float:
    """The length of the union of the intervals."""
    total, start = 0.0, 0.0  # `start` is read only once `end` is set with it
    end: float | None = None
    for a, b in sorted(spans):
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        else:
            end = max(end, b)
    return total + (end - start if end is not None else 0.0)


def suite_seconds(paths: Iterable[Path]) -> dict[str, float]:
    """Each suite's wall time over the runs under `paths`, by its `suite` name and by its run
    directory's name (a matrix run names each suite's directory after the suite file)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for run in run_timings(paths):
        for key in {run.suite, run.file.parent.name} - {""}:
            spans.setdefault(key, []).extend(run.windows)
    return {key: round(union_seconds(s), 1) for key, s in spans.items() if s}


def runs_seconds(paths: Iterable[Path]) -> float | None:
    """The wall time of all the runs under `paths` together (one pool's suites count once)."""
    spans = [w for run in run_timings(paths) for w in run.windows]
    return round(union_seconds(spans), 1) if spans else None


def filled(estimates: Sequence[float | None]) -> list[float]:
    """The estimates with each unknown one as the known ones' mean (DEFAULT_EST_S with none)."""
    known = [e for e in estimates if e is not None]
    default = sum(known) / len(known) if known else DEFAULT_EST_S
    return [default if e is None else e for e in estimates]


def lpt_partition(items: Sequence[T], estimates: Sequence[float | None], bins: int) -> list[list[T]]:
    """`items` in at most `bins` groups of about equal total estimate: longest first, each to
    the group with the least so far (the lowest-numbered on a tie); within a group, longest
    first. Unknown estimates count as `filled` says. Empty groups are left out."""
    if bins < 1:
        raise ValueError("bins must be >= 1")
    order = sorted(range(len(items)), key=lambda i: -filled(estimates)[i])
    loads = [0.0] * bins
    groups: list[list[T]] = [[] for _ in range(bins)]
    for i in order:
        k = min(range(bins), key=lambda b: (loads[b], b))
        loads[k] += filled(estimates)[i]
        groups[k].append(items[i])
    return [g for g in groups if g]
