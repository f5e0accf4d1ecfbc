"""ResultStore: one JSON file per cell, keyed so identical work is never redone.

Key = target, revision sha, configuration name and fingerprint, workload fingerprint, probe,
the probe's measured parameters, the flags the configuration's probes add to its server,
harness version. Each cell records the key it was measured
under, and a read checks it against the key asked for: a cell copied under another revision's
directory, or renamed, is not the measurement asked for and is measured again.

Files are written atomically with a digest of their content (harness.result_files). A file
that does not parse, carries an unknown schema or no longer matches its digest (truncated,
edited by hand) is reported as corrupt with its path, never silently used or overwritten.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import __version__
from harness.paths import safe_name
from harness.result_files import read_cell, write_cell
from harness.results import CellResult, Status


@dataclass(frozen=True)
class CellKey:
    target: str
    sha: str
    config: str
    config_fingerprint: str
    workload_fingerprint: str
    probe: str
    # The probe's MEASURED parameters (workload overrides, concurrency levels, batch sizes, top_k, …):
    # JUDGED ones (thresholds, floors) are left out, so changing one re-judges the stored cell.
    params_fingerprint: str = ""
    harness_version: str = __version__
    # The flags the configuration's probes add at launch (swa_peak's log flags): a cell
    # measured on a server with them is not one measured without.
    server_args_fingerprint: str = ""
    # The interpreter the server ran under (a revision may need its own packages): a cell
    # measured under another torch is another measurement.
    interpreter: str = ""

    def relpath(self) -> Path:
        return Path(self.target, self.sha[:12], safe_name(self.config)[:64],
                    f"{self.probe}-{self.config_fingerprint}-{self.workload_fingerprint}"
                    f"-{self.params_fingerprint}{self._args_part()}-i{self.interpreter}"
                    f"-v{self.harness_version}.json")

    def _args_part(self) -> str:
        return f"-a{self.server_args_fingerprint}" if self.server_args_fingerprint else ""

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def params_fingerprint(params: dict[str, Any] | list[str]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:8]


class ResultStore:
    def __init__(self, root: Path):
        self.root = root
        # Cells found under a key they were not measured under: reported, then measured again.
        self.mismatched: list[str] = []

    def path(self, key: CellKey) -> Path:
        return self.root / key.relpath()

    def get(self, key: CellKey) -> CellResult | None:
        """The stored cell, or None. Errors are not results: one stored by an older detcheck is
        measured again."""
        path = self.path(key)
        if not path.exists():
            return None
        cell = read_cell(path)
        if cell.key != key.to_dict():
            self.mismatched.append(f"{path}: recorded under another key ({_difference(cell.key, key)})")
            return None
        return cell if cell.status != Status.ERROR else None

    def put(self, key: CellKey, cell: CellResult) -> Path:
        path = self.path(key)
        if cell.key != key.to_dict():
            raise ValueError(f"cell for {key} records key {cell.key}")
        write_cell(path, cell)
        return path


def _difference(recorded: dict[str, str] | None, asked: CellKey) -> str:
    if recorded is None:
        return "no key recorded"
    diff = [f"{k} {recorded.get(k)!r} != {v!r}" for k, v in asked.to_dict().items() if recorded.get(k) != v]
    return ", ".join(diff) or "same fields, other values"
