"""The one reader of TOML files into typed values: suites (harness.suite), the hardware matrix
(harness.matrix) and the reference server's planted regressions (harness.fixture_repo).

One set of rules for all of them: a missing file names the files beside it; a file that is not
TOML is tomllib's error, with its line and column; an unknown key names the closest known one
(harness.params.reject_unknown); every value is checked against the type its key takes, a
declared parameter (`Param`) by its own rules; and every error names the file and the key's
path in one form, `<file>: <table>.<key>: <what is wrong>`.

Standard library only: noxfile.py imports the matrix before anything is installed.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from harness.bounded import TooLarge, read_file_text
from harness.errors import UsageError
from harness.params import Param, reject_unknown
from harness.textfmt import did_you_mean

# How a table that nothing encloses is named in errors.
TOP_LEVEL = "top level"
# A timeout's longest: one day.
MAX_SECONDS = 86_400
# How a value that no environment variable can spell is named.
_KINDS: dict[type, str] = {dict: "table", list: "list"}


# What a TOML text nested past what the reader recurses through is told (a suite, a matrix, --set).
TOO_DEEP = "nested deeper than detcheck reads (arrays or tables inside hundreds of others): not valid input"


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """A TOML file's table, or UsageError naming the file (`what`: "suite", "matrix", …)."""
    if not path.is_file():
        # A bare name (`--suite default`) means the file of that name in suites/, where this
        # project keeps its suites, or beside it with the .toml it lacks.
        named = [str(c) for c in (path.parent / "suites" / f"{path.name}.toml", path.parent / f"{path.name}.toml")
                 if path.suffix != ".toml" and c.is_file()]
        if named:
            raise UsageError(f"{what} file not found: {path}; did you mean {named[0]!r}?")
        siblings = [str(path.parent / p.name) for p in path.parent.glob(f"*{path.suffix}")] if path.parent.is_dir() else []
        raise UsageError(f"{what} file not found: {path}{did_you_mean(str(path), siblings)}")
    try:
        return tomllib.loads(read_file_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per level: a few hundred arrays deep end it
        raise UsageError(f"{path}: {TOO_DEEP}") from None
    except TooLarge as exc:
        raise UsageError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None


@dataclass(frozen=True)
class TomlTable:
    """One table of a TOML file and how errors name it (`where`: `[server]`, `[[entry]] 'x'`),
    with typed access to its keys."""

    path: Path
    where: str
    raw: dict[str, Any]

    @classmethod
    def read(cls, path: Path, what: str) -> TomlTable:
        """The file's top-level table (read_toml)."""
        return cls(path, TOP_LEVEL, read_toml(path, what))

    @property
    def label(self) -> str:
        """`<file>: <table>`, how every error about this table begins."""
        return f"{self.path}: {self.where}"

    def error(self, key: str, problem: str) -> UsageError:
        return UsageError(f"{self.label}.{key}: {problem}")

    def check_keys(self, known: Iterable[str]) -> None:
        """UsageError for a key not in `known`, naming the closest known one."""
        reject_unknown(self.label, self.raw, known)

    def table(self, key: str, where: str | None = None) -> TomlTable:
        """The sub-table `key` (empty where absent), named `where` (by default `<table>.<key>`,
        or `[key]` under the top level)."""
        value = self.raw.get(key, {})
        if not isinstance(value, dict):
            raise self.error(key, "must be a table")
        return TomlTable(self.path, where or (f"[{key}]" if self.where == TOP_LEVEL else f"{self.where}.{key}"), value)

    def array(self, key: str, what: str) -> list[Any]:
        """The array of tables `key` (`[[key]]`), which must hold one at least (`what` names them)."""
        value = self.raw.get(key, [])
        if not isinstance(value, list) or not value:
            raise UsageError(f"{self.path}: needs at least one {what}")
        return value

    def item(self, raw: Any, where: str) -> TomlTable:
        """One table of an array (`[[config]] #2`)."""
        if not isinstance(raw, dict):
            raise UsageError(f"{self.path}: {where} must be a table")
        return TomlTable(self.path, where, raw)

    def named(self, where: str) -> TomlTable:
        """This table named otherwise from here on (`[[config]] #1` → `[[config]] 'a'`)."""
        return TomlTable(self.path, where, self.raw)

    def string(self, key: str, default: str | None = None) -> str:
        value = self.raw.get(key, default)
        if not isinstance(value, str):
            raise self.error(key, "must be a string")
        return value

    def strings(self, key: str, numbers_as_text: bool = False) -> tuple[str, ...]:
        """A list of strings (absent: empty); `numbers_as_text`: a number stands for its spelling
        (a server argument `2` is `"2"`)."""
        value = self.raw.get(key, [])
        allowed = (str, int, float) if numbers_as_text else (str,)
        if not isinstance(value, list) or not all(isinstance(v, allowed) for v in value):
            raise self.error(key, "must be a list of strings")
        return tuple(str(v) for v in value)

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        """An integer from `low` to `high`."""
        value = self.raw.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise self.error(key, f"must be an integer from {low} to {high}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, "must be true or false")
        return value

    def seconds(self, key: str, default: float) -> float:
        """A timeout: a finite number of seconds in (0, one day]."""
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
            raise self.error(key, f"must be a number of seconds in (0, {MAX_SECONDS}], got {value!r}")
        return float(value)

    def env(self, key: str = "env") -> dict[str, str]:
        """Environment variables: each value a string or a number (a table or a list has no
        spelling as one)."""
        value = self.table(key).raw
        for name, item in value.items():
            if not isinstance(item, (str, int, float, bool)):
                kind = _KINDS.get(type(item), type(item).__name__)
                raise self.error(f"{key}.{name}", f"must be a string or a number, not a {kind}")
        return {str(k): str(v) for k, v in value.items()}

    def params(self, declared: Iterable[Param]) -> dict[str, Any]:
        """The keys that `declared` parameters name, each checked by its own rules (Param.validate);
        keys it does not declare are left to the caller."""
        by_name = {p.name: p for p in declared}
        return {k: by_name[k].validate(v, self.label) for k, v in self.raw.items() if k in by_name}
