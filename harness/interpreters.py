"""Whether the servers' interpreter can start SGLang at all, checked once before a run starts.

detcheck installs into an environment of its own, and `--python` defaults to the interpreter it
runs on, which has none of SGLang's dependencies: without this check every cell of a first run
failed with "No module named 'orjson'" after its launches, and nothing said to pass --python.
The check runs the revision's own `sglang.launch_server --help` (what reading its flags runs
anyway) under the interpreter, and turns a module it cannot import into one line (exit 2). A
module of the checkout itself that is missing is the revision's defect, not the interpreter's:
that stays each cell's error, as any other failure of `--help` does. A check that passed is
remembered per (interpreter, revision) in the cache, so later runs spend nothing on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.logparse import last_exception
from harness.metadata import interpreter_id
from harness.paths import sha_cache_file
from harness.targets import Target

_MISSING_MODULE = re.compile(r"^ModuleNotFoundError: No module named '([^']+)'")
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
    lacking = missing_import(output, target.package, interpreter.worktree is not None)
    if lacking is None:
        return  # not the interpreter's doing: the cells that need the flags say what happened
    how = (f"{interpreter.option} {target.python}" if interpreter.chosen
           else f"{target.python}, {interpreter.option}'s default: the interpreter detcheck runs on")
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
