"""Revisions: a git ref resolved to a sha and checked out as a cached worktree.

Worktrees live under the cache directory keyed by repo and sha and are reused across runs.
The user's own checkout is never touched: `git worktree add --detach` only adds a directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.gitcmd import git, git_run
from harness.paths import cache_dir, file_lock
from harness.results import RevisionInfo
from harness.textfmt import did_you_mean

# The cache's directory of revision worktrees: WORKTREES/<repo name>-<key>/<sha[:12]>/<tree>.
WORKTREES = "worktrees"


def remote_branch(ref: str, names: list[str]) -> str | None:
    """The remote-tracking branch `ref` names where it is no local ref (`base` → `origin/base`):
    origin's where it has one, else the one remote's that has it; None when none or several do."""
    found = [name for name in names if "/" in name and name.split("/", 1)[1] == ref]
    if f"origin/{ref}" in found:
        return f"origin/{ref}"
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class Revision:
    """A revision to run: `repo` + `ref` resolved to `sha`, or an installed package (no repo)."""

    ref: str
    sha: str | None
    repo: Path | None = None
    subject: str = ""

    @classmethod
    def resolve(cls, repo: str | Path, ref: str) -> Revision:
        repo = Path(repo).resolve()
        if not repo.is_dir():
            raise UsageError(f"--repo {repo}: not a directory")
        if git_run(repo, "rev-parse", "--is-inside-work-tree").returncode != 0:
            raise UsageError(f"--repo {repo}: not a git repository")
        proc = git_run(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if proc.returncode != 0:
            names = git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads", "refs/tags",
                        "refs/remotes", check=False).splitlines()
            remote = remote_branch(ref, names)
            if remote is None:
                # A remote's branch by its own name too: that resolves, as above.
                branches = [name.split("/", 1)[1] for name in names
                            if "/" in name and remote_branch(name.split("/", 1)[1], names) == name]
                raise UsageError(f"git ref {ref!r} does not resolve to a commit in {repo}"
                                 f"{did_you_mean(ref, [*names, *branches])}")
            # A CI clone (actions/checkout, `git clone`) has only its default branch locally: the
            # others are remote-tracking branches. Said on stderr, so that it is never silent.
            print(f"detcheck: git ref {ref!r} is no local branch in {repo}: using {remote!r}", file=sys.stderr)
            ref = remote
            proc = git_run(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        sha = proc.stdout.strip()
        subject = git(repo, "log", "-1", "--format=%s", sha)
        return cls(ref=ref, sha=sha, repo=repo, subject=subject)

    @classmethod
    def installed(cls, label: str = "installed") -> Revision:
        return cls(ref=label, sha=None)

    def short(self) -> str:
        return self.sha[:12] if self.sha else self.ref

    @property
    def info(self) -> RevisionInfo:
        return RevisionInfo(ref=self.ref, sha=self.sha, subject=self.subject)

    def checkout(self) -> Path | None:
        """The worktree for this sha (created once, then reused); None when installed.

        Runs sharing one cache take turns per repo (a lock file), and a worktree is built under a
        temporary name and moved into place: it is complete or absent, never half made."""
        if self.repo is None or self.sha is None:
            return None
        cache = cache_dir()
        if cache == self.repo or self.repo in cache.parents:
            raise UsageError(f"the cache directory {cache} is inside the repository under test "
                             f"{self.repo}; set DETCHECK_CACHE_DIR elsewhere")
        repo_key = hashlib.sha256(str(self.repo).encode()).hexdigest()[:10]
        root = cache / WORKTREES / f"{self.repo.name}-{repo_key}"
        path = root / self.sha[:12]
        if self._is_checked_out(path):
            return path
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"worktree directory {root} is not writable: {exc.strerror}") from None
        if not os.access(root, os.W_OK):
            raise UsageError(f"worktree directory {root} is not writable")
        with file_lock(root / ".lock"):
            if self._is_checked_out(path):  # another run made it while this one waited
                return path
            git(self.repo, "worktree", "prune")
            for stale in (path, *root.glob(f".{self.sha[:12]}.tmp-*")):
                git(self.repo, "worktree", "remove", "--force", str(stale), check=False)
                if stale.exists():
                    shutil.rmtree(stale)
            building = root / f".{self.sha[:12]}.tmp-{os.getpid()}"
            git(self.repo, "worktree", "add", "--detach", "--force", str(building), self.sha)
            git(self.repo, "worktree", "move", str(building), str(path))
        return path

    def _is_checked_out(self, path: Path) -> bool:
        return (path / ".git").exists() and git(path, "rev-parse", "HEAD", check=False) == self.sha


def uncommitted_changes(repo: Path | None) -> str:
    """'3 files changed' when tracked files of `repo` differ from HEAD; '' when clean."""
    if repo is None:
        return ""
    changed = [line for line in git(repo, "status", "--porcelain", "--untracked-files=no",
                                    check=False).splitlines() if line.strip()]
    return f"{len(changed)} tracked file{'s' * (len(changed) != 1)} changed" if changed else ""
