"""Whether the servers' interpreter can start SGLang at all, checked once before a run starts.

detcheck installs into an environment of its own, and `--python` defaults to the interpreter it
runs on, which has none of SGLang's dependencies: without this check every cell of a first run
failed with "No module named 'orjson'" after its launches, and nothing said to pass --python.
The check runs the revision's own `sglang.launch_server --help` (what reading its flags runs
anyway) under the interpreter, and turns a module it cannot import into one line (exit 2). A
module of the checkout itself that is missing is the revision's defect, not the interpreter's:
that stays each cell's error, as any other failure of `--help` does.

A compiled library the interpreter cannot load is the interpreter's too: an SGLang checkout of
one torch release on an environment of another (0.5.22 pins torch 2.14.1, 0.5.18–0.5.21 torch
2.13.0) fails in sglang-kernel's or flashinfer's `.so` with `undefined symbol` (an `ImportError`
from Python's import, an `OSError` from `ctypes`/`torch.ops.load_library`) or a library it cannot
open. That is said once too: which interpreter (and its torch), which library, which symbol, the
torch the revision pins, and the option that gives that side its own interpreter. Each
(interpreter, revision) is checked, not each interpreter once: a pair across a torch change fails
on one side only. A check that passed is remembered per (interpreter, revision) in the cache, so
later runs spend nothing on it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.bounded import INPUT_FILE, read_file
from harness.errors import UsageError
from harness.logparse import last_exception
from harness.metadata import interpreter_id, revision_interpreter_metadata
from harness.paths import sha_cache_file
from harness.targets import Target

_MISSING_MODULE = re.compile(r"^ModuleNotFoundError: No module named '([^']+)'")
# The dynamic loader's words, as Python's import (ImportError) and ctypes (OSError) pass them on:
# `<library>: undefined symbol: <name>`, `<library>: cannot open shared object file: …`,
# `<library>: version `GLIBCXX_3.4.32' not found (required by …)`.
_LIBRARY_FAILURE = re.compile(r"^(?:ImportError|OSError): (?P<library>[^\s:]+\.so(?:\.[\w.]+)?): (?P<why>.+)$")
_UNDEFINED_SYMBOL = re.compile(r"undefined symbol: (?P<symbol>\S+)")
_SITE_DIR = re.compile(r"/(?:site|dist)-packages/(?P<package>[^/]+)/")
# The torch a checkout pins (SGLang's python/pyproject.toml: "torch==2.14.1").
_TORCH_PIN = re.compile(r"[\"']torch==(?P<version>[^\"';\s]+)")
# README's section on running detcheck against an SGLang checkout.
README_SECTION = "README.md, \"On your SGLang checkout\""


@dataclass(frozen=True)
class ServerInterpreter:
    """An interpreter that will run servers directly, and how the user chose it."""

    target: Target  # the target, with this interpreter
    option: str  # the option that names it: --python, --base-python, --candidate-python
    chosen: bool  # False: --python's default, the interpreter detcheck itself runs on
    worktree: Path | None  # a revision it runs (its checkout: None for the installed package)
    sha: str | None
    revision: str  # the revision in words, for the message
    role: str  # the side it runs first ("base", "candidate"): the option that gives it its own


@dataclass(frozen=True)
class LibraryFailure:
    """A compiled library `--help` could not load, as the loader said it."""

    library: str  # its path (or name, where the loader did not find it)
    why: str  # the loader's words after the path
    package: str | None  # the installed package it belongs to (sgl_kernel, flashinfer, …)

    @property
    def symbol(self) -> str | None:
        found = _UNDEFINED_SYMBOL.search(self.why)
        return found["symbol"] if found else None

    def described(self) -> str:
        owner = f"{self.package}'s compiled library " if self.package else "the compiled library "
        symbol = self.symbol
        if symbol is None:
            return f"{owner}{self.library} ({self.why})"
        readable = demangled(symbol)
        return f"{owner}{self.library}: undefined symbol {symbol}{f' ({readable})' if readable else ''}"


def check_imports(interpreter: ServerInterpreter, timeout_s: float) -> None:
    """UsageError naming the interpreter, the module it lacks and how to point at SGLang's
    environment, when the revision's `--help` fails on an import; otherwise nothing."""
    target = interpreter.target
    marker = sha_cache_file("imports", f"{target.name}-{interpreter_id(target.python)}", interpreter.sha, ".ok")
    if marker is not None and marker.is_file():
        return
    code, output = target.read_help(interpreter.worktree, {}, timeout_s)
    if code == 0:
        if marker is not None:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        return
    how = (f"{interpreter.option} {target.python}" if interpreter.chosen
           else f"{target.python}, {interpreter.option}'s default: the interpreter detcheck runs on")
    failure = library_failure(output)
    if failure is not None:
        raise UsageError(mismatch_message(interpreter, how, failure))
    lacking = missing_import(output, target.package, interpreter.worktree is not None)
    if lacking is None:
        return  # not the interpreter's doing: the cells that need the flags say what happened
    raise UsageError(f"the servers' interpreter ({how}) lacks {lacking}, which `{target.module} --help` of "
                     f"{interpreter.revision} needs: point {interpreter.option} at the python of your SGLang "
                     f"environment (e.g. {interpreter.option} ~/sglang/.venv/bin/python), or install detcheck "
                     f"into that environment ({README_SECTION})")


def missing_import(output: str, package: str, from_checkout: bool) -> str | None:
    """What `--help`'s output says could not be imported ("module orjson", or ImportError's own
    words), or None when its last exception is no import failure or names a module of the
    checkout's own package (the revision's defect)."""
    exception = last_exception(output) or ""
    if (found := _MISSING_MODULE.match(exception)) is not None:
        module = found.group(1)
        if from_checkout and module.split(".")[0] == package:
            return None
        return f"module {module}"
    if exception.startswith("ImportError: ") and not (from_checkout and f"from '{package}" in exception):
        return exception.removeprefix("ImportError: ")
    return None


def library_failure(output: str) -> LibraryFailure | None:
    """The compiled library `--help`'s last exception says could not be loaded, if it says so."""
    found = _LIBRARY_FAILURE.match(last_exception(output) or "")
    if found is None:
        return None
    site = _SITE_DIR.search(found["library"])
    package = site["package"] if site else None
    return LibraryFailure(found["library"], found["why"], package)


def demangled(symbol: str) -> str | None:
    """A C++ symbol in words (binutils' c++filt, where the machine has it), else None."""
    tool = shutil.which("c++filt")
    if tool is None or not symbol.startswith("_Z"):
        return None
    try:
        words = subprocess.run([tool, symbol], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return words if words and words != symbol else None


def pinned_torch(worktree: Path | None) -> str | None:
    """The torch release a checkout pins in python/pyproject.toml (SGLang's), if it pins one."""
    pyproject = worktree / "python" / "pyproject.toml" if worktree is not None else None
    if pyproject is None or not pyproject.is_file():
        return None
    found = _TORCH_PIN.search(read_file(pyproject, INPUT_FILE).decode(errors="replace"))
    return found["version"] if found else None


def mismatch_message(interpreter: ServerInterpreter, how: str, failure: LibraryFailure) -> str:
    """One line: the interpreter and its torch, the library and symbol, the torch the revision
    pins, and the option that gives this side an interpreter of its own."""
    target = interpreter.target
    torch = revision_interpreter_metadata(target, interpreter.sha, interpreter.worktree).get("torch")
    pinned = pinned_torch(interpreter.worktree)
    has = f", torch {torch}" if torch else ""
    needs = f"; the {interpreter.role} pins torch=={pinned}" if pinned else ""
    side_option = f"--{interpreter.role}-python"
    built_for = f"torch {pinned}" if pinned else "its torch"
    return (f"the servers' interpreter ({how}{has}) cannot load {failure.described()}, which "
            f"`{target.module} --help` of {interpreter.revision} needs: an environment built for another "
            f"torch or SGLang release than this revision's{needs}; pass {side_option} with the python of an "
            f"environment built for {built_for} (each side may have its own: --base-python, --candidate-python)")
