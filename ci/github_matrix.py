"""`nox -l --json -t matrix` on stdin → a GitHub Actions `matrix=<json>` output line.

Each validate(<entry>) session becomes a row {entry, runner}: CPU entries run on a hosted
runner, GPU entries on self-hosted runners labelled with the entry's name (placeholders: map
them to your own labels).
"""

from __future__ import annotations

import json
import sys


def rows(sessions: list[dict]) -> list[dict]:
    out = []
    for s in sessions:
        entry = s["call_spec"]["entry"]
        runner = "ubuntu-latest" if "cpu" in s["tags"] else ["self-hosted", entry]
        out.append({"entry": entry, "runner": runner})
    return out


if __name__ == "__main__":
    print("matrix=" + json.dumps({"include": rows(json.load(sys.stdin))}))
