"""The one way detcheck calls git: an argument list (never a shell string), in a given repo,
with signing off so that commits made by the harness (fixtures, reverts) never prompt."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from harness.errors import UsageError


def git_argv(repo: Path, *args: str) -> list[str]:
    return ["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args]


def git_run(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(git_argv(repo, *args), capture_output=True, text=True, env=env)


def git(repo: Path, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
    """stdout, stripped; a failure is UsageError naming the command and repo (check=True)."""
    proc = git_run(repo, *args, env=env)
    if check and proc.returncode != 0:
        raise UsageError(f"{shlex.join(['git', *args])} in {repo}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def fixed_identity_env(date: str) -> dict[str, str]:
    """Commits the harness makes get a fixed author and clock: the same change gets the same
    sha, so a re-run finds its stored cells."""
    return {**os.environ, "GIT_AUTHOR_NAME": "detcheck", "GIT_AUTHOR_EMAIL": "detcheck@localhost",
            "GIT_COMMITTER_NAME": "detcheck", "GIT_COMMITTER_EMAIL": "detcheck@localhost",
            "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
