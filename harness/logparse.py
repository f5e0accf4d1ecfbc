"""SGLang's scheduler log lines, parsed into numbers.

Pool occupancy (SWA tokens, Mamba slots) and per-round accept lengths are only reported in
log lines, so the SWA and speculative probes read the log written during their requests.
Older builds wrote `Prefill batch.`; some add `[iter]` — both forms are accepted.

What SGLang 0.5.16 writes around the numbers:
- the bracket before a line carries the scheduler's rank prefix after the time,
  `[2026-01-01 00:00:00 DP1 TP1]` (` DP<d>` with data parallelism / DP attention, ` TP<t>` when
  tp > 1, also ` PP<p>`, ` EP<e>`): parsed into `BatchLine.dp_rank` / `tp_rank`, so a consumer
  can keep one curve per DP rank (`by_dp_rank`);
- after a request finishes, 1–2 Decode lines with nothing held (`#token: 0` / `#full token: 0`),
  one of them after the HTTP answer (the overlap scheduler's extra step), so whether a reader
  sees it races the answer: `BatchLine.released` marks them and `parse_batch_lines` (hence
  every curve built on it) leaves them out unless asked (`include_released=True`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BATCH = re.compile(r"(Prefill|Decode) batch(?: \[\d+\])?[.,]\s*(.*)")
# The logger's bracket just before the message: "[time DP0 TP0] Decode batch, ..."
_PREFIX = re.compile(r"\[([^\[\]]*)\]\s*$")
_RANK = re.compile(r"\b(DP|TP|PP|EP)(\d+)\b")
# A number is not followed by another dot or digit: text glued onto a line by another writer
# (an access-log "INFO: 127.0.0.1:...") must not parse as a field.
_FIELD = re.compile(r"(#?[A-Za-z][A-Za-z \-()/]*?):\s*(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\d.])|True|False)")


@dataclass(frozen=True)
class BatchLine:
    kind: str  # "prefill" or "decode"
    fields: dict[str, float]
    dp_rank: int | None = None  # from the " DP<d>" log prefix; None without data parallelism
    tp_rank: int | None = None  # from " TP<t>" (present when tp > 1)

    def get(self, name: str) -> float | None:
        return self.fields.get(name)

    @property
    def held_tokens(self) -> float | None:
        """Full-pool tokens a Decode line reports (`#token` or `#full token`)."""
        v = self.fields.get("#full token")
        return self.fields.get("#token") if v is None else v

    @property
    def released(self) -> bool:
        """A Decode line logged after the batch's requests finished and freed everything (held
        tokens 0): SGLang writes 1–2 of these per finished batch, not a decode step's state."""
        return self.kind == "decode" and self.held_tokens == 0


def parse_batch_lines(text: str, *, include_released: bool = False) -> list[BatchLine]:
    """Prefill and Decode lines, in order; released (zero-token) Decode lines only when
    `include_released`."""
    out = []
    for line in text.splitlines():
        m = _BATCH.search(line)
        if not m:
            continue
        ranks: dict[str, int] = {}
        head = _PREFIX.search(line[: m.start()])
        if head:
            ranks = {k: int(v) for k, v in _RANK.findall(head.group(1))}
        fields: dict[str, float] = {}
        for key, value in _FIELD.findall(m.group(2)):
            key = key.strip()
            if value in ("True", "False"):
                fields[key] = 1.0 if value == "True" else 0.0
            else:
                fields[key] = float(value)
        parsed = BatchLine(m.group(1).lower(), fields, ranks.get("DP"), ranks.get("TP"))
        if include_released or not parsed.released:
            out.append(parsed)
    return out


def by_dp_rank(lines: list[BatchLine]) -> dict[int | None, list[BatchLine]]:
    """Lines grouped by DP rank, in order within each (None: lines without a DP prefix)."""
    out: dict[int | None, list[BatchLine]] = {}
    for line in lines:
        out.setdefault(line.dp_rank, []).append(line)
    return out


def decode_series(text: str, name: str, *, include_released: bool = False,
                  dp_rank: int | None = None) -> list[float]:
    """One field of every Decode line, in order (e.g. '#swa token', 'accept len').  Lines
    logged after everything was released are skipped unless `include_released`; with
    `dp_rank`, only that rank's lines."""
    return [v for line in parse_batch_lines(text, include_released=include_released)
            if line.kind == "decode" and (dp_rank is None or line.dp_rank == dp_rank)
            for v in [line.get(name)] if v is not None]


_EXCEPTION = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception|Exit))(?::\s*(.*))?$")


def last_exception(text: str) -> str | None:
    """The last `SomeError: message` line of a log: why a server died, in one line.

    A bare `Exception: message` counts (SGLang wraps CUDA-graph capture failures in one:
    `Exception: Capture cuda graph failed: …`); a bare `Exception` or `Error` with no message
    says nothing and is passed over."""
    for line in reversed(text.splitlines()):
        m = _EXCEPTION.match(line)
        if not m or (m.group(1) in ("Exception", "Error") and not m.group(2)):
            continue
        return f"{m.group(1)}: {m.group(2)}" if m.group(2) else m.group(1)
    return None


# SGLang's scheduler when decode runs out of pool: "KV cache pool is full. Retract requests.
# #retracted_reqs: 1, …" (a "Testing retraction." line is its debug mode, not a shortage).
_RETRACT = re.compile(r"KV cache pool is full\. Retract requests\. #retracted_reqs: (\d+)")


@dataclass(frozen=True)
class Retraction:
    """One retraction, with the pools as the last Decode line before it reported them (as
    exact as the server's `--decode-log-interval`)."""

    requests: int
    swa_tokens: float | None  # `#swa token` held: None without an SWA pool or a Decode line
    full_tokens: float | None


def retractions(text: str) -> list[Retraction]:
    out, last = [], None
    for line in text.splitlines():
        retract = _RETRACT.search(line)
        if retract:
            out.append(Retraction(int(retract.group(1)),
                                  None if last is None else last.get("#swa token"),
                                  None if last is None else last.held_tokens))
            continue
        batch = parse_batch_lines(line)
        if batch and batch[0].kind == "decode":
            last = batch[0]
    return out


# SGLang's KV cache canary (srt/kv_canary/runner/violation_reporter.py): one line per violation,
# `kv_canary violation: launch_tag=… fail_reason=… slot_idx=… position=…`, logged as a warning
# under --kv-canary log (raise mode logs it and fails the forward).
_CANARY_VIOLATION = re.compile(r"kv_canary violation: launch_tag=\S+ fail_reason=\S+.*")


def canary_violations(text: str) -> list[str]:
    """Each canary violation line of `text`, from its `kv_canary violation:` on."""
    return [m.group(0).strip() for m in _CANARY_VIOLATION.finditer(text)]
