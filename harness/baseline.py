"""Baselines: reference values and bounds per model × configuration × GPU kind.

As TensorRT-LLM's accuracy references with their populate mode: `detcheck baseline populate`
derives each bound from measured runs, `detcheck run --baseline FILE` (or `baseline check`)
gates every candidate cell against the file. Every threshold lives in the file, none in code.

A bound applies to a metric's headline value (the number the report prints). Populating:

* exact metrics (bit-exact logprobs, fixed-workload peaks): min = max = reference, floor 0;
  runs that disagree are refused, since a varying exact metric is itself a finding;
* noisy metrics: reference = median of the runs' headlines; on the side where the metric gets
  worse (both sides when it has no direction) the bound is reference·(1 ∓ margin), widened to
  take in every observed run (TRT-LLM: min_al = 0.95·ref_al).

An entry records the configuration and workload fingerprints it was measured with; a cell
whose fingerprints differ is reported as stale rather than gated.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Iterable, Sequence

from harness.errors import UsageError
from harness.params import reject_unknown
from harness.results import CellResult, Role, RunResult, Status
from harness.verdict_stats import Kind
from harness.result_files import atomic_write_json, read_json

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Entry:
    model: str
    config: str
    gpu: str
    probe: str
    metric: str
    kind: str
    headline: str
    reference: float
    min: float | None
    max: float | None
    runs: int
    observed: tuple[float, float]
    rule: str
    config_fingerprint: str
    workload_fingerprint: str
    source: str = ""

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.model, self.config, self.gpu, self.probe, self.metric)

    def to_dict(self) -> dict:
        return {**asdict(self), "observed": list(self.observed)}

    def bounds(self) -> str:
        return f"= {_g(self.reference)}" if self.min == self.max is not None else f"[{_g(self.min)}, {_g(self.max)}]"


ENTRY_FIELDS = tuple(f.name for f in fields(Entry))


@dataclass(frozen=True)
class Baselines:
    entries: tuple[Entry, ...]

    def save(self, path: Path) -> None:
        entries = sorted(self.entries, key=lambda e: e.key)
        atomic_write_json(path, {"version": FORMAT_VERSION, "entries": [e.to_dict() for e in entries]})

    def merged(self, newer: Baselines) -> Baselines:
        """These entries, replaced by `newer` where the keys meet."""
        keep = {e.key: e for e in self.entries}
        keep.update({e.key: e for e in newer.entries})
        return Baselines(tuple(keep.values()))


def load(path: Path) -> Baselines:
    if not path.is_file():
        raise UsageError(f"baselines file not found: {path}")
    data = read_json(path, "baselines")
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise UsageError(f"{path}: version must be {FORMAT_VERSION}")
    reject_unknown(str(path), data, ("version", "entries"))
    raw = data.get("entries")
    if not isinstance(raw, list):
        raise UsageError(f"{path}: entries must be a list")
    return Baselines(tuple(_entry(path, i, e) for i, e in enumerate(raw)))


def _entry(path: Path, i: int, raw: object) -> Entry:
    where = f"{path}: entries[{i}]"
    if not isinstance(raw, dict):
        raise UsageError(f"{where} must be an object")
    reject_unknown(where, raw, ENTRY_FIELDS)
    for name in ("model", "config", "gpu", "probe", "metric", "kind", "headline",
                 "config_fingerprint", "workload_fingerprint"):
        if not isinstance(raw.get(name), str):
            raise UsageError(f"{where}.{name} must be a string")
    if raw["kind"] not in (Kind.EXACT.value, Kind.NOISY.value):
        raise UsageError(f"{where}.kind must be exact or noisy")
    for name in ("reference", "min", "max"):
        v = raw.get(name)
        if not (v is None and name != "reference") and not _number(v):
            raise UsageError(f"{where}.{name} must be a number" + (" or null" if name != "reference" else ""))
    observed = raw.get("observed", [raw["reference"], raw["reference"]])
    if not (isinstance(observed, list) and len(observed) == 2 and all(_number(v) for v in observed)):
        raise UsageError(f"{where}.observed must be [low, high]")
    return Entry(model=raw["model"], config=raw["config"], gpu=raw["gpu"], probe=raw["probe"],
                 metric=raw["metric"], kind=raw["kind"], headline=raw["headline"],
                 reference=float(raw["reference"]), min=_opt(raw.get("min")), max=_opt(raw.get("max")),
                 runs=int(raw.get("runs", 1)), observed=(float(observed[0]), float(observed[1])),
                 rule=str(raw.get("rule", "")), config_fingerprint=raw["config_fingerprint"],
                 workload_fingerprint=raw["workload_fingerprint"], source=str(raw.get("source", "")))


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _opt(v: float | None) -> float | None:
    return None if v is None else float(v)


def identity(cell: CellResult) -> tuple[str, str, str]:
    """(model, configuration, GPU kind) of a cell, from what the run recorded."""
    model_path = cell.server_flags().get("--model-path")
    model = Path(model_path).name if model_path is not None else "?"
    gpu = cell.metadata.get("gpu_name") or cell.metadata.get("gpu") or "cpu"
    return model, cell.config, str(gpu)


# --------------------------------------------------------------------------- populate


def populate(runs: Iterable[tuple[str, RunResult]], side: Role, margin: float) -> Baselines:
    """Entries from the `side` cells of stored runs ((source label, result) pairs)."""
    if not 0 <= margin < 1:
        raise UsageError(f"--margin must be in [0, 1), got {margin}")
    groups: dict[tuple, list[tuple[str, CellResult]]] = {}
    seen: set[tuple] = set()
    for label, result in runs:
        for cell in result.cells:
            # A cell reused from the store appears in several runs: count each measurement once.
            measured = (cell.revision.sha, cell.config_fingerprint, cell.workload_fingerprint,
                        cell.probe, cell.metadata.get("finished_at"))
            if cell.role != side or cell.status != Status.OK or measured in seen:
                continue
            seen.add(measured)
            for metric in cell.metrics:
                if not metric.headline:  # no statistic says anything (token ids, counters): no bound to hold
                    continue
                key = (*identity(cell), cell.probe, metric.name)
                groups.setdefault(key, []).append((label, cell))
    if not groups:
        raise UsageError(f"no {side.value} cells with results in the given runs")
    return Baselines(tuple(_derive(key, cells, margin) for key, cells in groups.items()))


def _derive(key: tuple, cells: list[tuple[str, CellResult]], margin: float) -> Entry:
    model, config, gpu, probe, name = key
    fingerprints = {(c.config_fingerprint, c.workload_fingerprint) for _, c in cells}
    if len(fingerprints) > 1:
        raise UsageError(f"{config}/{probe}: the runs measured different configurations or "
                         "workloads; populate from runs of one suite")
    metrics = [c.metric(name) for _, c in cells]
    headlines = [m.headline_value() for m in metrics if m is not None]
    values = [v for v in headlines if v is not None and not math.isnan(v)]
    first = metrics[0]
    assert first is not None
    if not values:
        raise UsageError(f"{config}/{probe}.{name}: no values to derive a baseline from")
    lo, hi = min(values), max(values)
    low: float | None
    high: float | None
    if first.kind == Kind.EXACT:
        if lo != hi:
            raise UsageError(f"{config}/{probe}.{name} is exact but varies across runs "
                             f"({lo!r} .. {hi!r}): not a baseline")
        ref, low, high, rule = lo, lo, hi, "exact: min = max = reference (floor 0)"
    else:
        ref = statistics.median(values)
        low = min(ref - abs(ref) * margin, lo) if first.better in ("higher", None) else None
        high = max(ref + abs(ref) * margin, hi) if first.better in ("lower", None) else None
        rule = f"noisy: reference·(1 ∓ {margin:g}) on the worse side, widened to the observed runs"
    sources = sorted({label for label, _ in cells})
    return Entry(model=model, config=config, gpu=gpu, probe=probe, metric=name, kind=first.kind.value,
                 headline=first.headline, reference=ref, min=low, max=high, runs=len(values),
                 observed=(lo, hi), rule=rule, config_fingerprint=cells[0][1].config_fingerprint,
                 workload_fingerprint=cells[0][1].workload_fingerprint,
                 source=f"{', '.join(sources)} ({time.strftime('%Y-%m-%d', time.gmtime())})")


# --------------------------------------------------------------------------- gate


@dataclass(frozen=True)
class Check:
    config: str
    probe: str
    metric: str
    status: str  # pass / fail / stale
    value: float | None
    entry: Entry

    def line(self) -> str:
        e = self.entry
        return (f"{self.status:<5} {self.config}/{self.probe} {self.metric} {_g(self.value)} "
                f"vs {e.bounds()} (reference {_g(e.reference)}; {e.model}, {e.gpu})")


def _g(v: float | None) -> str:
    return "–" if v is None else f"{v:.6g}"


def gate(result: RunResult, baselines: Baselines) -> tuple[list[Check], list[str]]:
    """Checks of every candidate cell with a baseline, and the cells that have none."""
    by_key = {e.key: e for e in baselines.entries}
    checks, unmatched = [], []
    for cell in result.cells:
        if cell.role != Role.CANDIDATE or cell.status != Status.OK:
            continue
        found = False
        for metric in cell.metrics:
            entry = by_key.get((*identity(cell), cell.probe, metric.name))
            if entry is None:
                continue
            found = True
            value = metric.headline_value()
            if (entry.config_fingerprint, entry.workload_fingerprint) != (cell.config_fingerprint,
                                                                          cell.workload_fingerprint):
                status = "stale"
            elif value is None or math.isnan(value):
                status = "fail"
            else:
                inside = (entry.min is None or value >= entry.min) and (entry.max is None or value <= entry.max)
                status = "pass" if inside else "fail"
            checks.append(Check(cell.config, cell.probe, metric.name, status, value, entry))
        if not found:
            unmatched.append(f"{cell.config}/{cell.probe}")
    return checks, unmatched


def unchecked(result: RunResult, checks: list[Check], baselines: Baselines) -> list[str]:
    """Why a gate is no pass whatever its checks say, in words: nothing checked against a bound
    (every candidate cell failed, never launched, or the run is of another suite: "0 checks"),
    or a candidate cell that was not measured: an error or a finding, or *n/a* where the
    baselines hold its (configuration, probe) (it served when they were measured)."""
    out = []
    if not any(c.status in ("pass", "fail") for c in checks):
        out.append("no candidate cell was checked against a bound")
    served = {(e.config, e.probe) for e in baselines.entries}
    out += [f"{c.config}/{c.probe}: the candidate's cell is {c.status.value}"
            + (f" ({c.reason.strip().splitlines()[0][:160]})" if c.reason.strip() else "")
            for c in result.cells if c.role == Role.CANDIDATE and (
                c.status in (Status.ERROR, Status.FINDING)
                or c.status == Status.NOT_APPLICABLE and (c.config, c.probe) in served)]
    return out


def gate_lines(path: Path, checks: list[Check], unmatched: list[str], unchecked: Sequence[str] = ()) -> list[str]:
    """The gate in words: a head line of counts, then every check; `unchecked`: why it is no
    pass whatever the checks say (`unchecked`, a record short of its plan)."""
    count = {s: sum(1 for c in checks if c.status == s) for s in ("pass", "fail", "stale")}
    head = (f"baseline {path}: {len(checks)} checks, {count['pass']} pass, {count['fail']} fail, "
            f"{count['stale']} stale (measured with another configuration or workload)")
    if unmatched:
        head += f"; no baseline for {', '.join(unmatched)}"
    if unchecked:
        head += f"; not a pass: {'; '.join(unchecked)}"
    return [head, *("  " + c.line() for c in checks)]


def failed(checks: list[Check]) -> bool:
    return any(c.status == "fail" for c in checks)
