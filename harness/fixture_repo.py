"""Git repositories of the reference server, made in a temp dir, with planted regressions.

A revision models one SGLang release (fixtures/refserver/release.py, the line marked
`# release-line`, and `# backports-line` off): `set_release` rewrites them, as a real checkout's version is a line of its
source. A regression is a one-line edit listed in fixtures/regressions.toml (file, the exact line,
its replacement). Commits carry fixed dates and author, so the same history always gets the
same shas and stored results are reused across demo runs.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.gitcmd import fixed_identity_env, git
from harness.paths import PROJECT_ROOT
from harness.typed_toml import TomlTable

FIXTURES = PROJECT_ROOT / "fixtures"
REGRESSIONS_FILE = FIXTURES / "regressions.toml"
PACKAGE = "refserver"
RELEASE_FILE = "release.py"
RELEASE_MARKER = "# release-line"
BACKPORTS_MARKER = "# backports-line"
# What a [<name>] table of regressions.toml may set.
REGRESSION_KEYS = ("file", "replace", "description", "hook")


@dataclass(frozen=True)
class Regression:
    """A planted bug: the code of the line marked `# regression-hook: <name>` in `file`
    becomes `replace` (indentation and marker kept)."""

    name: str
    file: str  # relative to the package's parent, e.g. "refserver/cache.py"
    replace: str
    description: str = ""
    hook: str = ""  # the marker's name where it is not `name` (two edits of one line)

    @property
    def marker(self) -> str:
        return f"# regression-hook: {self.hook or self.name}"

    def marked_line(self, lines: list[str]) -> int:
        """The index of the one line carrying this hook's marker."""
        hits = [i for i, line in enumerate(lines) if line.rstrip().endswith(self.marker)]
        if len(hits) != 1:
            raise RuntimeError(f"regression {self.name}: {len(hits)} lines of {self.file} carry {self.marker!r}")
        return hits[0]

    def apply(self, text: str) -> str:
        lines = text.split("\n")
        i = self.marked_line(lines)
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        lines[i] = f"{indent}{self.replace}  {self.marker}"
        return "\n".join(lines)


def load_regressions(path: Path = REGRESSIONS_FILE) -> dict[str, Regression]:
    regressions = TomlTable.read(path, "regressions")
    return {name: _regression(name, regressions.table(name)) for name in regressions.raw}


def _regression(name: str, table: TomlTable) -> Regression:
    table.check_keys(REGRESSION_KEYS)
    return Regression(name=name, file=table.string("file"), replace=table.string("replace"),
                      description=table.string("description", ""), hook=table.string("hook", ""))


def set_release(package_parent: Path, release: str) -> None:
    """Make the reference server under `package_parent` model SGLang `release` as shipped: its
    release line rewritten, and its backports line off (the tree carries the seeds' fixes as
    backports; a release has only the fixes it shipped with)."""
    file = package_parent / PACKAGE / RELEASE_FILE
    lines = file.read_text().split("\n")
    for marker, line in ((RELEASE_MARKER, f'RELEASE = "{release}"'), (BACKPORTS_MARKER, "SEED_FIXES_BACKPORTED = False")):
        hits = [i for i, text in enumerate(lines) if text.rstrip().endswith(marker)]
        if len(hits) != 1:
            raise RuntimeError(f"{len(hits)} lines of {file} carry {marker!r}")
        lines[hits[0]] = f"{line}  {marker}"
    file.write_text("\n".join(lines))


def check_free(path: Path) -> None:
    """UsageError unless `path` is free for a new repository: absent, or an empty directory
    that is no link. Whatever is there stays: it may be someone's (a kept demo's directory
    named again), and a link there may lead anywhere."""
    if path.is_symlink() or path.exists() and (not path.is_dir() or any(path.iterdir())):
        what = "a link" if path.is_symlink() else "a file" if not path.is_dir() else "a directory that is not empty"
        raise UsageError(f"{path}: is {what}; a fixture repository is made only where nothing is, "
                         f"and nothing there is removed to make room")


class FixtureRepo:
    """A repo whose python/refserver is the project's reference server."""

    def __init__(self, path: Path):
        self.path = path
        self._tick = 0
        self.regressions = load_regressions()
        self._original: dict[str, str] = {}  # regression -> its file's text before the edit

    @classmethod
    def create(cls, path: Path) -> FixtureRepo:
        """A new repository at `path`, which must be free (`check_free`)."""
        check_free(path)
        (path / "python").mkdir(parents=True, exist_ok=True)
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

    def branch_off(self, name: str, at: str) -> None:
        """Continue on a new branch `name` from commit `at` (two histories sharing their start)."""
        self._git("checkout", "-q", "-b", name, at)

    def edit(self, name: str, undo: bool = False) -> None:
        """Apply (or undo) a planted regression."""
        if name not in self.regressions:
            raise UsageError(f"unknown regression {name!r} (known: {', '.join(self.regressions)})")
        reg = self.regressions[name]
        file = self.path / "python" / reg.file
        if undo:
            file.write_text(self._original.pop(name))
            return
        self._original[name] = file.read_text()
        file.write_text(reg.apply(self._original[name]))

    def set_release(self, release: str) -> None:
        """Make the working tree model SGLang `release` (commit it to make a revision)."""
        set_release(self.path / "python", release)

    def note(self, subject: str) -> str:
        """A harmless commit (a changelog line), as most commits in a bisect range are."""
        log = self.path / "CHANGES.md"
        with open(log, "a") as f:
            f.write(f"- {subject}\n")
        return self.commit(subject)
