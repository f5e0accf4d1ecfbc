"""Figures of a seed-scale run read from its two server logs: what each side's scheduler
logged, through the harness's own log parser. Default: logs/ (the second attempt, cut off at its
500 s limit before the base's round ended, so detcheck recorded no cell); or another run's logs.

    python results/h200/seed/figures.py [LOGS_DIR]
"""

from __future__ import annotations

import gzip
import re
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness.logparse import parse_batch_lines, retractions  # noqa: E402

PROMPT = 1024  # suites/h200/swa-dflash-seed.toml
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
NEW_TOKENS = re.compile(r"Prefill batch.*?#new-token: (\d+)")


def stamps(text: str, needle: str) -> list[datetime]:
    return [datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
            for line in text.splitlines() if needle in line and (m := STAMP.match(line))]


def figures(log: Path) -> dict[str, object]:
    text = gzip.open(log, "rt").read()
    decode = [b for b in parse_batch_lines(text) if b.kind == "decode"]
    events = retractions(text)
    times = stamps(text, "Decode batch")
    # The first prefill of a workload prompt (the server's own warm-up requests are shorter).
    first_prefill = next(t for t, n in zip(stamps(text, "Prefill batch"), NEW_TOKENS.findall(text))
                         if int(n) >= PROMPT)
    swa_at = [e.swa_tokens for e in events if e.swa_tokens is not None]
    return {
        "decode lines": len(decode),
        "first prefill → last decode (s)": (times[-1] - first_prefill).total_seconds(),
        "full tokens held at the last line": decode[-1].held_tokens,
        "running requests at the last line": decode[-1].get("#running-req"),
        "SWA peak (#swa token)": max(b.get("#swa token") or 0 for b in decode),
        "SWA peak usage": max(b.get("swa token usage") or 0 for b in decode),
        "retractions (log lines)": len(events),
        "requests retracted": sum(e.requests for e in events),
        "SWA tokens at the first retraction": swa_at[0] if swa_at else None,
        "first prefill → first retraction (s)": ((stamps(text, "Retract requests")[0] - first_prefill).total_seconds()
                                                 if events else None),
        # What the running requests held beyond their 1,024-token prompts: tokens generated and
        # still held (a retracted request waiting in the queue holds none, so for a side that
        # retracts this is a lower bound).
        "generated tokens held at the last line": decode[-1].held_tokens - PROMPT * decode[-1].get("#running-req"),
    }


if __name__ == "__main__":
    logs_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "logs"
    logs = sorted(logs_dir.glob("*.log.gz"))
    table = {log.name.split("-")[-2]: figures(log) for log in logs}
    sides = list(table)
    print("| figure | " + " | ".join(sides) + " |\n|---|" + "---|" * len(sides))
    for side in sides:
        f = table[side]
        f["generated tokens per second of wall"] = round(
            f["generated tokens held at the last line"] / f["first prefill → last decode (s)"])
    for key in table[sides[0]]:
        print(f"| {key} | " + " | ".join(f"{table[s][key]:,}" if isinstance(table[s][key], (int, float))
                                       else str(table[s][key]) for s in sides) + " |")
