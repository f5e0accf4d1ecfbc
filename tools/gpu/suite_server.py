"""One server of a suite's configuration, started as the pipeline starts it (the revision's
`--help` maps the configuration's features to flags; the flags of the probes named are added),
for the GPU-session tools that speak to a server outside a detcheck run (conformance.py,
raw_generate.py, retract_logprobs.py). `worktree` None: the installed package (on the GPU machine
PYTHONPATH=/tmp/site). What a tool records and prints of the server is redacted as a run's cells are:
its argv with secret flags' values masked (by name, and as the revision's `--help` describes them).
"""

from __future__ import annotations

import argparse
import json
import shlex
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
from harness.redaction import redact_argv  # noqa: E402
from harness.pipeline.steps import revision_server_flags  # noqa: E402
from harness.revisions import Revision  # noqa: E402
from harness.server import ServerProcess, launch  # noqa: E402
from harness.targets import TRANSIENT_LAUNCH_FAILURES, get_target  # noqa: E402


@dataclass(frozen=True)
class Started:
    suite: Suite
    config: ServerConfig
    server: ServerProcess
    failure: LaunchError | None
    secret_flags: frozenset[str]  # the flags the revision's `--help` describes as secrets

    def recorded_argv(self) -> list[str]:
        """The server's argv as a record or a printed line may hold it: secrets masked."""
        return redact_argv(list(self.server.argv), self.secret_flags)


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
    return Started(suite, config, launched.server, launched.failure, caps.secret_flags)


def revision_parser(description: str | None) -> argparse.ArgumentParser:
    """The arguments of a tool that starts one configuration's server at a revision of a repo."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", type=Path, required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--repo", type=Path, required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--target", default="sglang", choices=("sglang", "refserver"))
    p.add_argument("--python", default=None)
    return p


def start_at_revision(args: argparse.Namespace) -> tuple[Started, dict]:
    """The server `revision_parser`'s arguments name, its log at OUT/server.log; and the head of
    the tool's record (what was started, with which argv)."""
    args.out.mkdir(parents=True, exist_ok=True)
    revision = Revision.resolve(args.repo, args.ref)
    started = start(args.suite, args.config, args.target, None, args.out / "server.log", args.python,
                    revision.checkout(), revision.sha)
    record = {"suite": str(args.suite), "config": args.config, "ref": args.ref, "sha": revision.sha,
              "argv": started.recorded_argv()}
    if started.failure is not None:
        record["launch_failure"] = str(started.failure)
        print(f"server did not start: {started.failure}\n{started.failure.log_tail}", file=sys.stderr)
    return started, record


def command_line(record: dict) -> str:
    """The record's (redacted) server argv as one shell-quoted line, as a shell would take it back."""
    return shlex.join(record["argv"])


def write_record(out: Path, stem: str, record: dict, table: list[str]) -> None:
    """`stem`.json (the record) and `stem`.md (its table, and why the server did not start)."""
    (out / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
    if record.get("launch_failure"):
        table = [*table, "", f"The server did not start: {record['launch_failure']}"]
    (out / f"{stem}.md").write_text("\n".join(table) + "\n")
