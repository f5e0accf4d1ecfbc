"""Git repositories of the reference server, made in a temp dir, with planted regressions.

A regression is a one-line edit listed in fixtures/regressions.toml (file, the exact line,
its replacement). Commits carry fixed dates and author, so the same history always gets the
same shas and stored results are reused across demo runs.
"""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.gitcmd import fixed_identity_env, git
from harness.paths import PROJECT_ROOT

FIXTURES = PROJECT_ROOT / "fixtures"
REGRESSIONS_FILE = FIXTURES / "regressions.toml"
PACKAGE = "refserver"


@dataclass(frozen=True)
class Regression:
    name: str
    file: str  # relative to the package's parent, e.g. "refserver/cache.py"
    find: str
    replace: str
    description: str = ""


def load_regressions(path: Path = REGRESSIONS_FILE) -> dict[str, Regression]:
    raw = tomllib.loads(path.read_text())
    return {name: Regression(name=name, file=t["file"], find=t["find"], replace=t["replace"],
                             description=t.get("description", ""))
            for name, t in raw.items()}


class FixtureRepo:
    """A repo whose python/refserver is the project's reference server."""

    def __init__(self, path: Path):
        self.path = path
        self._tick = 0
        self.regressions = load_regressions()
        self._edited: dict[str, int] = {}  # regression -> line index it edited (undo goes there)

    @classmethod
    def create(cls, path: Path) -> FixtureRepo:
        if path.exists():
            shutil.rmtree(path)
        (path / "python").mkdir(parents=True)
        shutil.copytree(FIXTURES / PACKAGE, path / "python" / PACKAGE,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        repo = cls(path)
        repo._git("init", "-q", "-b", "main")
        repo.commit("reference server")
        return repo

    def _git(self, *args: str) -> str:
        # Fixed identity and clock: identical histories get identical shas.
        stamp = f"2026-01-01T00:{self._tick // 60:02d}:{self._tick % 60:02d}+00:00"
        return git(self.path, *args, env=fixed_identity_env(stamp))

    def commit(self, subject: str) -> str:
        self._git("add", "-A")
        self._git("commit", "-q", "--allow-empty", "-m", subject)
        self._tick += 1
        return self.head()

    def head(self) -> str:
        return self._git("rev-parse", "HEAD")

    def edit(self, name: str, undo: bool = False) -> None:
        """Apply (or undo) a planted regression: exactly one matching line must exist."""
        if name not in self.regressions:
            raise UsageError(f"unknown regression {name!r} (known: {', '.join(self.regressions)})")
        reg = self.regressions[name]
        old, new = (reg.replace, reg.find) if undo else (reg.find, reg.replace)
        file = self.path / "python" / reg.file
        lines = file.read_text().split("\n")
        hits = [i for i, line in enumerate(lines) if line.strip() == old.strip()]
        if undo and self._edited.get(name) in hits:  # the replacement may also occur elsewhere
            hits = [self._edited[name]]
        if len(hits) != 1:
            raise RuntimeError(f"regression {name}: {len(hits)} lines of {reg.file} match {old!r}")
        line = lines[hits[0]]
        lines[hits[0]] = line[: len(line) - len(line.lstrip())] + new.strip()
        file.write_text("\n".join(lines))
        self._edited[name] = hits[0]

    def note(self, subject: str) -> str:
        """A harmless commit (a changelog line), as most commits in a bisect range are."""
        log = self.path / "CHANGES.md"
        with open(log, "a") as f:
            f.write(f"- {subject}\n")
        return self.commit(subject)
