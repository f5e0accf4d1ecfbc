"""Every JSON document detcheck writes or reads back: results.json of a run, store cells,
baseline files, per-revision caches. Written atomically; read with the path in every error.

Result documents carry a `schema` number. A reader accepts the current schema and upgrades
older ones through `UPGRADES` (one step per version, as pyperf's format history does), so a
stored run from an earlier detcheck still renders and compares.

    schema 1  first format
    schema 2  cells record the full key they were measured under (`key`); comparisons carry
              `judged` facts per side (gates derived at compare time) and the verdict enum's
              values (the same strings)
    schema 3  a *different* comparison may carry `reproducer` (its smallest request); the
              revision_kl probe's samples and facts. Nothing older changes meaning: the step
              only renumbers. Later, without a new number (optional keys, read as absent by
              older readers): a reproducer's `verification` (posted to both sides' servers)
              and a replay request's `follows`; a file without them reads as not verified
    schema 4  a run carries its `plan` (every planned (configuration, probe, side) cell, the
              judging parameters, the run's id, whether its last step marked it complete);
              the parameters moved from `metadata.probe_params` into it. An upgraded file has
              no plan: it renders, but is never a pass (harness/completeness.py says so)
"""

from __future__ import annotations

import hashlib
import gzip
import lzma
import json
import math
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, TypeVar

from harness import bounded
from harness.errors import CorruptResult, UsageError
from harness.results import SCHEMA_VERSION, CellResult, RunResult

T = TypeVar("T")
RESULTS_FILE = "results.json"
GZ_RESULTS_FILE = f"{RESULTS_FILE}.gz"
# Committed GPU runs: xz's window spans a whole run, so a side's samples that repeat the other
# side's cost almost nothing (a 20 MB run: 6.4 MB gzipped, 0.37 MB with xz -9e).
XZ_RESULTS_FILE = f"{RESULTS_FILE}.xz"
RESULT_FILE_NAMES = (RESULTS_FILE, GZ_RESULTS_FILE, XZ_RESULTS_FILE)


def atomic_write_json(path: Path, data: Any) -> None:
    """Temp file in the same directory, fsync, rename: a crash leaves the old file or the new.
    Compact: json's C encoder serves only unindented output, 4× faster on a GPU run's
    results.json (which is rewritten after every configuration) and half the size; `detcheck
    report` is its reader, `python -m json.tool` its pretty-printer."""
    atomic_write_text(path, strict_json(data))


def strict_json(data: Any) -> str:
    """`data` as strict JSON (RFC 8259 has no NaN or Infinity, and jq, browsers and most parsers
    reject Python's bare `NaN` tokens): a non-finite float is written as null. Such a figure is
    always explained beside it: a NaN or inf a server returned makes its cell a finding whose
    reason names where (harness.probes.common, ProbeOutput.non_finite)."""
    try:  # the common case, all figures finite: the C encoder alone (no walk in Python)
        return json.dumps(data, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return json.dumps(_finite_or_null(data), allow_nan=False, separators=(",", ":"))


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    return value


_umask_lock = threading.Lock()


def process_umask() -> int:
    """The umask, read the only way there is (set it, set it back) under a lock: two threads
    doing that at once could leave it at 0."""
    with _umask_lock:
        umask = os.umask(0)
        os.umask(umask)
    return umask


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file 0600; results are ordinary files, readable as the umask allows.
        os.fchmod(fd, 0o666 & ~process_umask())
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.filename is None:
            # A failed write or fsync (a full disk) names no file: the message must say which.
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def read_json(path: Path, what: str = "result") -> Any:
    """A JSON document; compressed when its name ends in .gz or .xz (committed GPU runs keep
    their results.json compressed: samples with top-k logprobs run to megabytes). Read up to
    `bounded.RESULT_DOCUMENT`, inflated or not: a plain file of gigabytes, or a small one that
    inflates to them (a gzip bomb), is refused instead of filling memory."""
    try:
        return json.loads(bounded.read_file(path, bounded.RESULT_DOCUMENT).decode())
    except bounded.TooLarge as exc:
        raise CorruptResult(f"{exc}; not a {what} file detcheck wrote") from None
    except json.JSONDecodeError as exc:
        raise CorruptResult(f"{path}: corrupt {what} file ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise CorruptResult(f"{path}: corrupt {what} file (not UTF-8)") from None
    except IsADirectoryError:
        raise CorruptResult(f"{path}: is a directory, not a {what} file") from None
    except (gzip.BadGzipFile, lzma.LZMAError, EOFError) as exc:
        codec = "xz" if path.suffix == ".xz" else "gzip"
        raise CorruptResult(f"{path}: corrupt {what} file ({codec}: {exc or 'truncated'})") from None


def content_digest(data: dict[str, Any]) -> str:
    """What a cell file says, independent of its formatting: any edit of a value changes it."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, allow_nan=True).encode()).hexdigest()


# -- schema history ------------------------------------------------------------------

def _cell_1_to_2(cell: dict[str, Any]) -> dict[str, Any]:
    return {**cell, "schema": 2, "key": None}  # measured before cells recorded their key


def _cell_2_to_3(cell: dict[str, Any]) -> dict[str, Any]:
    return {**cell, "schema": 3}


def _cell_3_to_4(cell: dict[str, Any]) -> dict[str, Any]:
    return {**cell, "schema": 4}


Step = Callable[[dict[str, Any]], dict[str, Any]]


def _run_step(cell_step: Step, to: int) -> Step:
    """A results document's step: its own schema number, and each of its cells' step."""
    def step(run: dict[str, Any]) -> dict[str, Any]:
        cells = run.get("cells", [])
        if isinstance(cells, list):  # a damaged container is left for the reader to report
            cells = [cell_step(c) if isinstance(c, dict) else c for c in cells]
        return {**run, "schema": to, "cells": cells}
    return step


# (document kind, from schema) -> upgrade to from + 1
UPGRADES: dict[tuple[str, int], Step] = {
    ("cell", 1): _cell_1_to_2,
    ("results", 1): _run_step(_cell_1_to_2, 2),
    ("cell", 2): _cell_2_to_3,
    # comparisons written before reproducers existed have none (`reproducer` absent: None)
    ("results", 2): _run_step(_cell_2_to_3, 3),
    ("cell", 3): _cell_3_to_4,
    # written before runs recorded their plan: none (`plan` absent), so never a pass; its
    # `metadata.probe_params` stay where they were, read by `RunResult.judging_params`
    ("results", 3): _run_step(_cell_3_to_4, 4),
}


def upgraded(path: Path, what: str, data: Any) -> dict[str, Any]:
    """`data` brought to SCHEMA_VERSION, or CorruptResult naming the file."""
    if not isinstance(data, dict):
        raise CorruptResult(f"{path}: corrupt {what} file (a {type(data).__name__}, not an object)")
    while data.get("schema") != SCHEMA_VERSION:
        schema = data.get("schema")
        step = UPGRADES.get((what, schema)) if isinstance(schema, int) else None
        if step is None:
            raise CorruptResult(f"{path}: schema {schema!r}, expected {SCHEMA_VERSION}")
        data = step(data)
    return data


def _decode(path: Path, what: str, data: dict[str, Any], from_dict: Callable[[dict[str, Any]], T]) -> T:
    try:
        return from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptResult(f"{path}: corrupt {what} file (bad field: {exc})") from None


# -- runs ----------------------------------------------------------------------------

def write_run(out_dir: Path, result: RunResult) -> Path:
    path = out_dir / RESULTS_FILE
    atomic_write_json(path, result.to_dict())
    return path


def run_files(out_dir: Path) -> list[Path]:
    """The results a run directory holds: results.json, results.json.gz or .xz, several or none."""
    return [f for f in (out_dir / name for name in RESULT_FILE_NAMES) if f.is_file()]


def read_run(path: Path) -> RunResult:
    """A run directory or its results.json (or results.json.gz / .xz). A directory holding
    several that differ is CorruptResult: which one is the run is not for the reader to guess."""
    files = run_files(path) if path.is_dir() else [path] if path.is_file() else []
    if not files:
        where = path / RESULTS_FILE if path.is_dir() else path
        raise UsageError(f"{where}: no results here (expected a run directory with {RESULTS_FILE})")
    documents = [upgraded(f, "results", read_json(f, "results")) for f in files]
    if len({json.dumps(d, sort_keys=True, allow_nan=True) for d in documents}) > 1:  # NaN != NaN
        raise CorruptResult(f"{path}: holds both {' and '.join(f.name for f in files)}, and they differ; "
                            f"remove the one that is not this run's")
    return _decode(files[0], "results", documents[0], RunResult.from_dict)


# -- store cells ---------------------------------------------------------------------

def write_cell(path: Path, cell: CellResult) -> None:
    data = json.loads(strict_json(cell.to_dict()))  # as a reader will see it
    atomic_write_json(path, {**data, "digest": content_digest(data)})


def read_cell(path: Path) -> CellResult:
    data = read_json(path, "cell")
    if not isinstance(data, dict):
        raise CorruptResult(f"{path}: corrupt cell file (a {type(data).__name__}, not an object)")
    digest = data.pop("digest", None)
    current = upgraded(path, "cell", data)  # an unknown schema is named as such, before the digest
    if digest != content_digest(data):
        raise CorruptResult(f"{path}: content does not match its digest (edited by hand?); "
                            f"delete it or run with --fresh to measure it again")
    return _decode(path, "cell", current, CellResult.from_dict)
