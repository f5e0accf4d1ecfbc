"""ResultStore: one JSON file per cell, keyed so identical work is never redone.

Key = target, revision sha, configuration fingerprint, workload fingerprint, probe, harness
version. Writes are atomic (temp file + rename in the same directory), so a crash leaves
either the old file or the new one. Each file carries a digest of its content. A file that
does not parse, carries another schema or no longer matches its digest (truncated, edited by
hand) is reported as corrupt with its path, never silently used or overwritten unseen.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from harness import __version__
from harness.errors import CorruptResult
from harness.results import SCHEMA_VERSION, CellResult, Status

T = TypeVar("T")


@dataclass(frozen=True)
class CellKey:
    target: str
    sha: str
    config_fingerprint: str
    workload_fingerprint: str
    probe: str
    # The probe's MEASURED parameters (workload overrides, concurrency levels, batch sizes, top_k, …):
    # JUDGED ones (thresholds, floors) are left out, so changing one re-judges the stored cell.
    params_fingerprint: str = ""
    harness_version: str = __version__

    def relpath(self) -> Path:
        return Path(self.target, self.sha[:12],
                    f"{self.probe}-{self.config_fingerprint}-{self.workload_fingerprint}"
                    f"-{self.params_fingerprint}-v{self.harness_version}.json")


def params_fingerprint(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:8]


def atomic_write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file 0600; results are ordinary files, readable as the umask allows.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, allow_nan=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_json(path: Path, what: str = "result") -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CorruptResult(f"{path}: corrupt {what} file ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise CorruptResult(f"{path}: corrupt {what} file (not UTF-8)") from None


def content_digest(data: dict[str, Any]) -> str:
    """What a cell file says, independent of its formatting: any edit of a value changes it."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, allow_nan=True).encode()).hexdigest()


def read_versioned(path: Path, what: str) -> dict[str, Any]:
    """A result document of this schema version, or CorruptResult naming the file."""
    data = read_json(path, what)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise CorruptResult(f"{path}: schema {found!r}, expected {SCHEMA_VERSION}")
    return data


def decode(path: Path, what: str, data: dict[str, Any], from_dict: Callable[[dict[str, Any]], T]) -> T:
    try:
        return from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptResult(f"{path}: corrupt {what} file (bad field: {exc})") from None


def load_cell(path: Path) -> CellResult:
    data = read_versioned(path, "cell")
    if data.pop("digest", None) != content_digest(data):
        raise CorruptResult(f"{path}: content does not match its digest (edited by hand?); "
                            f"delete it or run with --fresh to measure it again")
    return decode(path, "cell", data, CellResult.from_dict)


@dataclass(frozen=True)
class ResultStore:
    root: Path

    def path(self, key: CellKey) -> Path:
        return self.root / key.relpath()

    def get(self, key: CellKey) -> CellResult | None:
        """The stored cell, or None. Errors are not cached: a failed cell is tried again."""
        path = self.path(key)
        if not path.exists():
            return None
        cell = load_cell(path)
        return cell if cell.status != Status.ERROR else None

    def put(self, key: CellKey, cell: CellResult) -> Path:
        path = self.path(key)
        data = json.loads(json.dumps(cell.to_dict(), allow_nan=True))  # as a reader will see it
        atomic_write_json(path, {**data, "digest": content_digest(data)})
        return path
