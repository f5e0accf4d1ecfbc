"""One server of a suite's configuration, started as the pipeline starts it (the revision's
`--help` maps the configuration's features to flags; the flags of the probes named are added),
for the GPU-session tools that speak to a server outside a detcheck run (conformance.py,
raw_generate.py). `worktree` None: the installed package (on the GPU machine PYTHONPATH=/tmp/site).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.capabilities import revision_capabilities  # noqa: E402
from harness.errors import LaunchError  # noqa: E402
from harness.suite import ServerConfig, Suite, load_suite  # noqa: E402
from harness.probes import known_probes  # noqa: E402
from harness.pipeline.steps import revision_server_flags  # noqa: E402
from harness.server import ServerProcess, launch  # noqa: E402
from harness.targets import TRANSIENT_LAUNCH_FAILURES, get_target  # noqa: E402


@dataclass(frozen=True)
class Started:
    suite: Suite
    config: ServerConfig
    server: ServerProcess
    failure: LaunchError | None


def start(suite_path: Path, config_name: str, target_name: str, probes: tuple[str, ...] | None, log_path: Path,
          python: str | None = None, worktree: Path | None = None, sha: str | None = None) -> Started:
    """`probes` None: the configuration's own, so the server gets what a detcheck run gives it."""
    suite = load_suite(suite_path, known_probes())
    spec = suite.config(config_name)
    config = suite.server_config(spec, target_name)
    probes = spec.probes if probes is None else probes
    target = get_target(target_name, python)
    caps = revision_capabilities(target, sha, worktree, suite.startup_timeout_s)
    flags = revision_server_flags(caps, config, probes)
    launched = launch(lambda port: target.launch_argv(config, flags, port), target.env(worktree, config.env),
                      log_path, worktree, suite.startup_timeout_s, TRANSIENT_LAUNCH_FAILURES)
    return Started(suite, config, launched.server, launched.failure)


def write_record(out: Path, stem: str, record: dict, table: list[str]) -> None:
    """`stem`.json (the record) and `stem`.md (its table, and why the server did not start)."""
    (out / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
    if record.get("launch_failure"):
        table = [*table, "", f"The server did not start: {record['launch_failure']}"]
    (out / f"{stem}.md").write_text("\n".join(table) + "\n")
