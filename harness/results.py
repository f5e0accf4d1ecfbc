"""Immutable result objects that round-trip through JSON.

A probe yields a ProbeOutput (raw samples + named metrics); the runner wraps it in a
CellResult with the revision, configuration and metadata; a RunResult gathers the cells of
one base-vs-candidate run with their comparisons. Renderers and `detcheck report` read only
these objects, so a fresh run and a stored one print through the same code.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from harness.verdict_stats import Comparison, Kind, Verdict
from harness.textfmt import ShellText, shell_join

SCHEMA_VERSION = 4  # history and upgraders: harness/result_files.py


class Status(str, Enum):
    OK = "ok"
    # The server answered, but not as SGLang must (null logprobs, died mid-probe): a result
    # about the revision, with the raw samples that show it.
    FINDING = "finding"
    ERROR = "error"
    NOT_APPLICABLE = "n/a"


class Role(str, Enum):
    BASE = "base"
    CANDIDATE = "candidate"


@dataclass(frozen=True)
class Metric:
    """One measured quantity: per-prompt (or per-run) values and how to compare them."""

    name: str
    kind: Kind
    values: tuple[float, ...]
    unit: str = ""
    # "lower" / "higher" is better; None when only equality matters (bit-exact metrics).
    better: str | None = None
    # The number a reviewer reads in the table: "median", "mean", "max", "sum" or "first"; ""
    # where no statistic says anything (token ids, flattened top-k lists: equal or not).
    headline: str = "median"
    # values[i] of base and candidate come from the same prompt (or seed): a noisy comparison
    # is then judged on the per-index differences (Wilcoxon signed-rank, paired bootstrap).
    paired: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "values": list(self.values),
            "unit": self.unit,
            "better": self.better,
            "headline": self.headline,
            # written only when set, so a file from before pairing round-trips unchanged
            **({"paired": True} if self.paired else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Metric:
        return cls(
            name=d["name"],
            kind=Kind(d["kind"]),
            values=tuple(float(v) for v in d["values"]),
            unit=d.get("unit", ""),
            better=d.get("better"),
            headline=d.get("headline", "median"),
            paired=bool(d.get("paired", False)),  # absent before pairing: unpaired
        )

    def headline_value(self) -> float | None:
        if not self.values or not self.headline:
            return None
        vals = sorted(self.values)
        if self.headline == "mean":
            return sum(vals) / len(vals)
        if self.headline == "max":
            return vals[-1]
        if self.headline == "sum":
            return sum(vals)
        if self.headline == "first":
            return self.values[0]
        mid = len(vals) // 2
        return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


@dataclass(frozen=True)
class ProbeOutput:
    """What a probe returns: raw per-request samples, metrics (first = primary), extras."""

    samples: tuple[dict[str, Any], ...]
    metrics: tuple[Metric, ...]
    # Small derived facts a report shows as-is (hit fraction, peak, first divergent position).
    facts: dict[str, Any] = field(default_factory=dict)

    def non_finite(self) -> str | None:
        """Where the first NaN or inf among the measured figures is ("metric tok_s_c8 value 3
        is nan"), or None: a figure no statistic can use is a finding, never a verdict."""
        for m in self.metrics:
            for i, v in enumerate(m.values):
                if not math.isfinite(v):
                    return f"measured {m.name} value {i} is {v!r} ({len(m.values)} values)"
        return None


@dataclass(frozen=True)
class RevisionInfo:
    ref: str
    sha: str | None  # None for an installed package with no git checkout
    subject: str = ""
    version: str = ""

    @property
    def short(self) -> str:
        return self.sha[:12] if self.sha else (self.version or self.ref)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RevisionInfo:
        return cls(**d)


@dataclass(frozen=True)
class CellResult:
    """One probe of one configuration on one revision."""

    config: str
    probe: str
    role: Role
    revision: RevisionInfo
    status: Status
    config_fingerprint: str
    workload_fingerprint: str
    samples: tuple[dict[str, Any], ...] = ()
    metrics: tuple[Metric, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)
    reason: str = ""  # error message or the n/a reason
    log_tail: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    # The store key it was measured under (harness.store.CellKey as a dict); None for a cell
    # of an installed package (no sha) or upgraded from schema 1.
    key: dict[str, str] | None = None
    schema: int = SCHEMA_VERSION

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)

    @property
    def primary(self) -> Metric | None:
        return self.metrics[0] if self.metrics else None

    def with_role(self, role: Role) -> CellResult:
        return dataclasses.replace(self, role=role)

    def server_flags(self) -> dict[str, str]:
        """Each token of the recorded server command line mapped to the one after it: a flag's
        value, the last one given winning, as the server's argparse reads it (empty before a
        launch was recorded)."""
        argv = list(self.metadata.get("server_argv") or [])
        return dict(zip(argv, argv[1:]))

    @property
    def noisy(self) -> bool:
        """Holds a noisy metric: comparable only with a measurement of the same run."""
        return any(m.kind == Kind.NOISY for m in self.metrics)

    def as_reused(self) -> CellResult:
        """This stored cell, marked as taken from the store (its `finished_at` says when it
        was measured)."""
        return dataclasses.replace(self, metadata={**self.metadata, "reused": True})

    def reference(self) -> dict[str, Any]:
        """What an earlier, stored measurement of a noisy cell said: shown, never judged."""
        primary = self.primary
        return {"finished_at": self.metadata.get("finished_at"),
                "metric": primary.name if primary else None,
                "headline": primary.headline_value() if primary else None}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "config": self.config,
            "probe": self.probe,
            "role": self.role.value,
            "revision": self.revision.to_dict(),
            "status": self.status.value,
            "config_fingerprint": self.config_fingerprint,
            "workload_fingerprint": self.workload_fingerprint,
            "reason": self.reason,
            "facts": self.facts,
            "metrics": [m.to_dict() for m in self.metrics],
            "samples": list(self.samples),
            "log_tail": self.log_tail,
            "metadata": self.metadata,
            "key": self.key,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CellResult:
        return cls(
            schema=d["schema"],
            config=d["config"],
            probe=d["probe"],
            role=Role(d["role"]),
            revision=RevisionInfo.from_dict(d["revision"]),
            status=Status(d["status"]),
            config_fingerprint=d["config_fingerprint"],
            workload_fingerprint=d["workload_fingerprint"],
            reason=d.get("reason", ""),
            facts=_typed(d, "facts", dict),
            metrics=tuple(Metric.from_dict(m) for m in _typed(d, "metrics", list)),
            samples=tuple(_typed(d, "samples", list)),
            log_tail=_typed(d, "log_tail", str),
            metadata=_typed(d, "metadata", dict),
            key=d["key"],
        )


@dataclass(frozen=True)
class Launch:
    """One server start: the unit the pipeline tries to minimise."""

    config: str
    role: Role
    sha: str | None
    port: int
    startup_s: float
    ok: bool
    args: tuple[str, ...] = ()
    # Unix seconds: the launch began, and its server was stopped (after its probes). Several
    # jobs run at once: a stored run's wall time vs its slowest job is read from these.
    started_at: float | None = None
    ended_at: float | None = None
    # Why the server was started again before this record's server (a port taken, a warm-up
    # that could not reach its own port: the host's doing, not the revision's), one reason per
    # extra start, in order; every start wrote to the same log.
    relaunched: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["role"] = self.role.value
        d["args"] = list(self.args)
        d["relaunched"] = list(self.relaunched)
        # Absent, not null or empty, in a file written before launches were timed or relaunched:
        # it reads back the same.
        return {k: v for k, v in d.items()
                if not (k in ("started_at", "ended_at") and v is None or k == "relaunched" and not v)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Launch:
        return cls(**{**d, "role": Role(d["role"]), "args": tuple(d.get("args", ())),
                      "started_at": _unix_seconds(d, "started_at"), "ended_at": _unix_seconds(d, "ended_at"),
                      "relaunched": tuple(str(why) for why in _typed(d, "relaunched", list))})


# SGLang's default port: a reproducer's curl lines assume a server there (the cells' argv).
REPRODUCER_PORT = 30000
# The shell variable a reproducer's lines in report.md read the port from (REPRODUCER_PORT
# unless the reader sets it): one setting moves both the servers and the requests.
PORT_VARIABLE = "$PORT"


@dataclass(frozen=True)
class Request:
    """One request of a reproducer, as sent to each side's server."""

    what: str
    path: str  # "/generate" or "/flush_cache"
    body: dict[str, Any] | None = None
    # A replay (or next turn) of a side's own answer: (k, n) — posted with the body's first n input
    # ids, the output ids that request k's answer returned on that side, then the body's ids after
    # the stored output (request k's max_new_tokens of them: a next turn's new text). The body
    # holds one side's stored output in their place, which the curl line sends as it is.
    follows: tuple[int, int] | None = None

    def curl(self, port: int = REPRODUCER_PORT) -> str:
        """The curl line to a server on `port` (what results.json stores: an argv to split)."""
        return shlex.join(self._curl_argv(f"http://127.0.0.1:{port}{self.path}"))

    def curl_to_port_variable(self) -> str:
        """The curl line to the server on the shell's `$PORT` (report.md's, which sets it to each
        server's port in turn): the port the only expansion, the path from the file quoted, the
        answer ended by a line break (`-w '\\n'`) so that each answer is a line of its own."""
        argv = self._curl_argv(ShellText(f'"http://127.0.0.1:{PORT_VARIABLE}"' + shlex.quote(self.path)))
        return shell_join([*argv[:2], "-w", "\\n", *argv[2:]])

    def _curl_argv(self, url: str) -> list[str]:
        argv = ["curl", "-s", "-X", "POST", url]
        if self.body is not None:
            argv += ["-H", "Content-Type: application/json", "-d", json.dumps(self.body, separators=(",", ":"))]
        return argv

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "path": self.path, "body": self.body, "curl": self.curl(),
                **({"follows": list(self.follows)} if self.follows else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Request:
        follows = d.get("follows")
        return cls(d["what"], d["path"], d.get("body"), None if not follows else (int(follows[0]), int(follows[1])))


@dataclass(frozen=True)
class Reproducer:
    """The smallest request(s) that show a *different* comparison (harness/reproducer.py)."""

    prompts: tuple[int, ...]  # workload prompt indices: the smallest set that still differs
    first_divergent: dict[str, Any] | None  # {"prompt", "position", "what", "side"?}
    requests: tuple[Request, ...]  # in order, to each side's server
    expect: str  # what differs between the two sides' answers
    shrink: str  # how it was made small, from what
    re_measurements: int = 0  # requests posted to the servers to verify and shrink it
    position_range: tuple[int, int] | None = None  # [start, end) where cached state first diverges
    # What posting it to both sides' servers showed (harness/verify.py); None: not verified.
    verification: Verification | None = None
    # Where no request can show the difference (a throughput level): the options of `detcheck
    # run` that measure this row again, after the run's own (report.md writes the whole line).
    command: tuple[str, ...] = ()
    # How its requests are built at each size and their answers read (harness.reproducer.Form):
    # in memory only, for the run's verification; never written.
    form: Any = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"prompts": list(self.prompts), "first_divergent": self.first_divergent,
                "requests": [r.to_dict() for r in self.requests], "expect": self.expect,
                "shrink": self.shrink, "re_measurements": self.re_measurements,
                "position_range": None if self.position_range is None else list(self.position_range),
                **({"verification": self.verification.to_dict()} if self.verification else {}),
                **({"command": list(self.command)} if self.command else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reproducer:
        span = d.get("position_range")
        return cls(prompts=tuple(d["prompts"]), first_divergent=d.get("first_divergent"),
                   requests=tuple(Request.from_dict(r) for r in d["requests"]), expect=d["expect"],
                   shrink=d["shrink"], re_measurements=int(d.get("re_measurements", 0)),
                   position_range=None if span is None else (int(span[0]), int(span[1])),
                   verification=Verification.from_dict(d["verification"]) if d.get("verification") else None,
                   command=tuple(str(a) for a in d.get("command") or ()))


@dataclass(frozen=True)
class Verification:
    """A reproducer posted to servers of both sides (harness/verify.py): whether the answers
    differ as the verdict says, at the size published, and what each side answered there."""

    reproduced: int  # attempts at the published size whose answers showed the difference
    attempts: int  # attempts at that size
    observed: str  # what each side answered at the published size, in words
    tried: tuple[tuple[int, bool], ...]  # (size, showed it) per attempt, in order
    dimension: str  # what the size is ("max_new_tokens", "scored sequence"); "" where none
    size: int  # the published size
    calls: int  # requests posted, both sides
    budget: int  # requests allowed
    budget_ran_out: bool
    servers: str  # "still up" (the run's own) or "relaunched"
    error: str = ""  # why no attempt could be made (a server that would not start, a request that failed)

    @property
    def shows(self) -> bool:
        return self.attempts > 0 and self.reproduced == self.attempts

    def to_dict(self) -> dict[str, Any]:
        return {"reproduced": self.reproduced, "attempts": self.attempts, "observed": self.observed,
                "tried": [list(t) for t in self.tried], "dimension": self.dimension, "size": self.size,
                "calls": self.calls, "budget": self.budget, "budget_ran_out": self.budget_ran_out,
                "servers": self.servers, **({"error": self.error} if self.error else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verification:
        return cls(reproduced=int(d["reproduced"]), attempts=int(d["attempts"]), observed=str(d["observed"]),
                   tried=tuple((int(a), bool(b)) for a, b in d["tried"]), dimension=str(d["dimension"]),
                   size=int(d["size"]), calls=int(d["calls"]), budget=int(d["budget"]),
                   budget_ran_out=bool(d["budget_ran_out"]), servers=str(d["servers"]), error=str(d.get("error", "")))



@dataclass(frozen=True)
class ProbeComparison:
    """Base vs candidate for one (configuration, probe): a comparison per shared metric."""

    config: str
    probe: str
    verdict: Verdict
    metrics: dict[str, Comparison] = field(default_factory=dict)
    note: str = ""
    # Per side ("base", "candidate"): facts that depend on JUDGED parameters (a gate), derived
    # when compared; a report shows them with the cell's own facts.
    judged: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The metric whose verdict is the comparison's (the first deciding metric that reads it);
    # None when no metric decided (n/a, error), or in a file written before it was recorded.
    decided_by: str | None = None
    # A *different* comparison's smallest request that shows it (harness/reproducer.py).
    reproducer: Reproducer | None = None
    # Metrics that do not decide and read *different* (exact ones an explicit `verdict_metrics`
    # left out, noisy ones beside the primary): the row names them, so a verdict they did not
    # decide never stands bare beside them.
    changed_not_deciding: tuple[str, ...] = ()
    # The metrics that decided the verdict (the probe's deciding metrics, `probes.base.
    # deciding_metrics`, that both sides measured), in order: what a later re-judging (`compare`
    # of two runs) reads, never derives again; empty where none decided, or in a file written
    # before it was recorded.
    deciding: tuple[str, ...] = ()

    def facts(self, cell: CellResult) -> dict[str, Any]:
        """A cell's facts with what judging this comparison added."""
        return {**cell.facts, **self.judged.get(cell.role.value, {})}

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "config": self.config,
            "probe": self.probe,
            "verdict": self.verdict.value,
            "note": self.note,
            "metrics": {k: c.to_dict() for k, c in self.metrics.items()},
        }
        if self.decided_by is not None:
            d["decided_by"] = self.decided_by
        if self.reproducer is not None:
            d["reproducer"] = self.reproducer.to_dict()
        if self.changed_not_deciding:
            d["changed_not_deciding"] = list(self.changed_not_deciding)
        if self.deciding:
            d["deciding"] = list(self.deciding)
        return {**d, "judged": self.judged} if self.judged else d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProbeComparison:
        return cls(
            config=d["config"],
            probe=d["probe"],
            verdict=Verdict(d["verdict"]),
            note=d.get("note", ""),
            metrics={k: Comparison.from_dict(c) for k, c in d.get("metrics", {}).items()},
            judged=d.get("judged", {}),
            decided_by=d.get("decided_by"),  # absent in schema-2 files written before it
            reproducer=Reproducer.from_dict(d["reproducer"]) if d.get("reproducer") else None,
            # written only when some changed; "changed_exact" in files written before noisy ones counted
            changed_not_deciding=tuple(d.get("changed_not_deciding", d.get("changed_exact", ()))),
            deciding=tuple(d.get("deciding", ())),  # written only when some decided
        )


@dataclass(frozen=True)
class RunPlan:
    """What a run set out to measure, written before its first cell: every (configuration,
    probe, side) cell, and the judging parameters it was planned with. `complete` is set only by
    the run's last step (`pipeline.finish`, a Slurm merge of every job of this run): a record
    killed, interrupted or cut short keeps False, and a pass is read only from a complete record
    whose every planned pair was judged (harness/completeness.py)."""

    run_id: str  # this run's own token: a Slurm job's results must carry it to be merged
    cells: tuple[tuple[str, str, Role], ...]  # (configuration, probe, side), in plan order
    probe_params: dict[str, dict[str, Any]]  # every planned probe's parameters as judged
    complete: bool = False

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """The (configuration, probe) pairs the plan measures, in plan order."""
        return tuple(dict.fromkeys((config, probe) for config, probe, _ in self.cells))

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "complete": self.complete, "probe_params": self.probe_params,
                "cells": [[config, probe, role.value] for config, probe, role in self.cells]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunPlan:
        cells = tuple((str(c), str(p), Role(r)) for c, p, r in _typed(d, "cells", list))
        complete = d.get("complete")
        if not isinstance(complete, bool):
            raise TypeError(f"plan.complete is a {type(complete).__name__}, expected true or false")
        return cls(run_id=str(d["run_id"]), cells=cells, probe_params=_typed(d, "probe_params", dict),
                   complete=complete)


@dataclass(frozen=True)
class RunResult:
    """Everything one `detcheck run` produced; the document `report` re-renders."""

    suite: str
    target: str
    base: RevisionInfo
    candidate: RevisionInfo
    cells: tuple[CellResult, ...]
    comparisons: tuple[ProbeComparison, ...]
    launches: tuple[Launch, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    # What the run set out to measure (None: a file written before schema 4, or one whose plan
    # was removed: never a pass).
    plan: RunPlan | None = None
    schema: int = SCHEMA_VERSION

    def cell(self, config: str, probe: str, role: Role) -> CellResult | None:
        return next(
            (c for c in self.cells if c.config == config and c.probe == probe and c.role == role),
            None,
        )

    def judging_params(self) -> dict[str, Any] | None:
        """Every probe's parameters as the run judged them: its plan's, or (a file written before
        plans) `metadata.probe_params`; None where the file records none."""
        params = self.plan.probe_params if self.plan is not None else self.metadata.get("probe_params")
        return params if isinstance(params, dict) else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "suite": self.suite,
            "target": self.target,
            "base": self.base.to_dict(),
            "candidate": self.candidate.to_dict(),
            "metadata": self.metadata,
            **({"plan": self.plan.to_dict()} if self.plan is not None else {}),
            "launches": [l.to_dict() for l in self.launches],
            "comparisons": [c.to_dict() for c in self.comparisons],
            "cells": [c.to_dict() for c in self.cells],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        return cls(
            schema=d["schema"],
            suite=d["suite"],
            target=d["target"],
            base=RevisionInfo.from_dict(d["base"]),
            candidate=RevisionInfo.from_dict(d["candidate"]),
            metadata=_typed(d, "metadata", dict),
            plan=RunPlan.from_dict(_typed(d, "plan", dict)) if d.get("plan") is not None else None,
            launches=tuple(Launch.from_dict(l) for l in _typed(d, "launches", list)),
            comparisons=tuple(ProbeComparison.from_dict(c) for c in _typed(d, "comparisons", list)),
            cells=tuple(CellResult.from_dict(c) for c in _typed(d, "cells", list)),
        )


def _unix_seconds(d: dict[str, Any], key: str) -> float | None:
    """A launch's time (absent: None), or TypeError naming the key: the start order subtracts
    them (`--order-from`), so a string or a list there is a damaged file, not a crash later."""
    value = d.get(key)
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    raise TypeError(f"launch {key} is a {type(value).__name__}, expected Unix seconds (a number)")


def _typed(d: dict[str, Any], key: str, kind: type) -> Any:
    """d[key] (an empty `kind` when absent), or TypeError naming the key: a results file whose
    containers have the wrong type is reported as damaged, not found later by a renderer."""
    value = d.get(key, kind())
    if not isinstance(value, kind):
        raise TypeError(f"{key} is a {type(value).__name__}, expected a {kind.__name__}")
    return value
