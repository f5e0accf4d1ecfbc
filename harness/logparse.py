"""SGLang's scheduler log lines, parsed into numbers.

Pool occupancy (SWA tokens, Mamba slots) and per-round accept lengths are only reported in
log lines, so the SWA and speculative probes read the log written during their requests.
Older builds wrote `Prefill batch.`; some add `[iter]` — both forms are accepted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BATCH = re.compile(r"(Prefill|Decode) batch(?: \[\d+\])?[.,]\s*(.*)")
# A number is not followed by another dot or digit: text glued onto a line by another writer
# (an access-log "INFO: 127.0.0.1:...") must not parse as a field.
_FIELD = re.compile(r"(#?[A-Za-z][A-Za-z \-()/]*?):\s*(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\d.])|True|False)")


@dataclass(frozen=True)
class BatchLine:
    kind: str  # "prefill" or "decode"
    fields: dict[str, float]

    def get(self, name: str) -> float | None:
        return self.fields.get(name)


def parse_batch_lines(text: str) -> list[BatchLine]:
    out = []
    for line in text.splitlines():
        m = _BATCH.search(line)
        if not m:
            continue
        fields: dict[str, float] = {}
        for key, value in _FIELD.findall(m.group(2)):
            key = key.strip()
            if value in ("True", "False"):
                fields[key] = 1.0 if value == "True" else 0.0
            else:
                fields[key] = float(value)
        out.append(BatchLine(m.group(1).lower(), fields))
    return out


def decode_series(text: str, name: str) -> list[float]:
    """One field of every Decode line, in order (e.g. '#swa token', 'accept len')."""
    return [v for line in parse_batch_lines(text) if line.kind == "decode"
            for v in [line.get(name)] if v is not None]


_EXCEPTION = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception|Exit))(?::\s*(.*))?$")


def last_exception(text: str) -> str | None:
    """The last `SomeError: message` line of a log: why a server died, in one line."""
    for line in reversed(text.splitlines()):
        m = _EXCEPTION.match(line)
        if m and m.group(1) not in ("Exception", "Error"):
            return f"{m.group(1)}: {m.group(2)}" if m.group(2) else m.group(1)
    return None
