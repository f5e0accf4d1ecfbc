"""How to start a server for a revision: real SGLang, or the CPU reference server.

Both are started as `python -m <module>` with the revision's package directory in front of
PYTHONPATH, so the worktree's code runs, not whatever is installed. The harness never imports
either: it learns their flags from `--help` and talks to them over HTTP.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from harness.configs import ServerConfig
from harness.paths import PROJECT_ROOT

# Every server listens on loopback only, on a port the harness picks.
HOST = "127.0.0.1"
# Byte-compiling SGLang's ~3,000 modules takes seconds; a filesystem that hangs must not hang the run.
COMPILE_TIMEOUT_S = 300

# Launch failures that mean "this revision refuses this combination" (a result: n/a), as
# opposed to a crash (an error). Phrases SGLang uses in its argument checks (0.5.16 and 0.5.17
# server_args.py: "extra_buffer_lazy unsupported with spec." / "... unsupported with DFLASH; ...",
# "--swa-full-tokens-ratio should be in range (0, 1.0].").
REJECTION = re.compile(
    r"unsupported (?:with|under) |not yet compatible|is not supported|does not support|"
    r"unrecognized arguments|invalid choice|should be in range \(0, 1\.0\]|"
    # SGLang 0.5.20/0.5.21: unified memory with a speculative algorithm other than DSPARK (kit2)
    r"only supports --speculative-algorithm",
    re.I,
)


@dataclass(frozen=True)
class TransientLaunchFailure:
    """A launch failure that says nothing about the revision, only about the host at that
    moment: the launch is tried again on a fresh port, at most `retries` more times. `evidence`
    are regular expressions that must all match the failed attempt's text (the failure and what
    the attempt wrote to its log), each after the previous one's match, so a crash that merely
    mentions one of them is never retried; `{port}` in one stands for the attempt's port."""

    reason: str  # what the launch record and the relaunch notice say
    evidence: tuple[str, ...]
    retries: int

    def matches(self, text: str, port: int) -> bool:
        at = 0
        for pattern in self.evidence:
            found = re.compile(pattern.replace("{port}", str(port)), re.M).search(text, at)
            if found is None:
                return False
            at = found.end()
        return True


# Someone else bound the port between the harness choosing it and the server binding it, or
# answers on it. The words "address already in use" alone prove nothing (a metrics exporter's
# warning, a crash that quotes them): they count where they are the cause, in one of three
# places: uvicorn's bind failure on this attempt's port; server.ServerProcess's own check of
# this port; or the last exception the attempt logged (a bind of the server's own, by the
# kernel's errno text, with no later exception that killed it).
_BIND_FAILED = r"error while attempting to bind on address \('[^']*', {port}\): (?i:address already in use)"
_ANSWERED_BY_ANOTHER = r"^port {port} is answered by another process .*: address already in use"
_EXCEPTION_LINE = r"^[A-Za-z_][\w.]*(?:Error|Exception): "
_LAST_EXCEPTION_IS_BIND = rf"{_EXCEPTION_LINE}.*(?i:address already in use).*$(?![\s\S]*{_EXCEPTION_LINE})"
PORT_TAKEN = TransientLaunchFailure("address already in use",
                                    (f"{_BIND_FAILED}|{_ANSWERED_BY_ANOTHER}|{_LAST_EXCEPTION_IS_BIND}",), retries=2)
# SGLang 0.5.16/0.5.17 (entrypoints/http_server.py, _execute_server_warmup): a thread polls the
# server's own /model_info; when every poll failed it logs "Initialization failed. warmup
# error: <traceback>" and kills its own process tree (SIGKILL). The same log line follows a
# warm-up request that failed (HTTP 500 of a crashing scheduler): only a refused connection to
# this server's own port, after that line, is the host's doing. On the H200 (40 servers
# starting at once) each such death followed uvicorn's failure to bind the port, which
# PORT_TAKEN names first: the warm-up's ~70-line traceback comes after it, which is why an
# attempt is judged by all it logged, not its last lines.
WARMUP_REFUSED = TransientLaunchFailure(
    "the warm-up could not connect to the server's own port",
    (r"Initialization failed\. warmup error",
     r"^(?=.*(?:ConnectionError|Connection refused)).*\(host='[^']*', port={port}\)"),
    retries=1,
)
# Every target's (the reference server models SGLang's start-up and its warm-up failure); the
# first that matches names the failure, so the cause comes before its consequences.
TRANSIENT_LAUNCH_FAILURES = (PORT_TAKEN, WARMUP_REFUSED)


@dataclass(frozen=True)
class Target:
    name: str
    module: str
    # Where the importable package lives inside a checkout (SGLang: python/sglang).
    package_dir: str = "python"
    python: str = sys.executable
    # The module, inside the package, that registers the past fixes SGLANG_DEBUG_REVERT_PR can
    # revert (harness/selftest.py reads its registry from the revision's source).
    fix_toggle: str = ""

    @property
    def package(self) -> str:
        """The package a checkout of this target holds under package_dir (sglang, refserver)."""
        return self.module.split(".")[0]

    def pythonpath(self, worktree: Path | None) -> str | None:
        if worktree is not None:
            return str(worktree / self.package_dir)
        if self.name == "refserver":
            return str(PROJECT_ROOT / "fixtures")
        return None  # installed SGLang: whatever the interpreter imports

    def env(self, worktree: Path | None, extra: dict[str, str]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(extra)
        front = self.pythonpath(worktree)
        if front:
            env["PYTHONPATH"] = front + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def compile_sources(self, worktree: Path | None) -> None:
        """Byte-compile the checkout's package with the interpreter that runs it. Servers started
        together would otherwise each compile every module they import until the first of them
        has written its .pyc files. Best effort: a file that does not compile fails the import
        that needs it, with the server's own message."""
        if worktree is None:
            return
        try:
            subprocess.run([self.python, "-m", "compileall", "-q", "-j", "0",
                            str(worktree / self.package_dir / self.package)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def help_argv(self) -> list[str]:
        return [self.python, "-m", self.module, "--help"]

    def launch_argv(self, config: ServerConfig, feature_args: tuple[str, ...], port: int) -> list[str]:
        return [self.python, "-m", self.module, "--model-path", str(config.model),
                "--host", HOST, "--port", str(port), *feature_args, *config.args]

    def read_help(self, worktree: Path | None, extra_env: dict[str, str],
                  timeout_s: float) -> tuple[int | None, str]:
        """(exit code, output) of `--help`; one that hangs past `timeout_s` is killed: (None, …)."""
        try:
            proc = subprocess.run(self.help_argv(), env=self.env(worktree, extra_env), cwd=worktree,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return None, f"{out}\n`--help` did not finish within {timeout_s:.0f} s (the suite's startup_timeout_s)"
        return proc.returncode, proc.stdout + proc.stderr


TARGETS: dict[str, Target] = {
    "sglang": Target("sglang", "sglang.launch_server", fix_toggle="srt/debug_utils/pr_fix_toggle.py"),
    "refserver": Target("refserver", "refserver", fix_toggle="pr_fix_toggle.py"),
}
TARGET_NAMES = tuple(TARGETS)


def target_of_checkout(repo: Path) -> Target | None:
    """The target whose package the checkout's tree holds (python/sglang: SGLang, python/refserver:
    a reference-server fixture repo); None when it holds neither."""
    return next((t for t in TARGETS.values() if (repo / t.package_dir / t.package).is_dir()), None)


def foreign_server_argv(target: str, argv: Sequence[object]) -> str:
    """Why a server argv read from a results file is not run or printed as a command: it must
    start the target's own server (`-m <module>`); a results.json may come from elsewhere, and
    `-c …` or another module would be its code. "" where it does."""
    known = TARGETS.get(target)
    words = [str(a) for a in argv]
    if known is not None and words[:2] == ["-m", known.module]:
        return ""
    start = f"the {target} server (`-m {known.module}`)" if known else f"a server of a known target ({target!r} is none)"
    return f"results.json's server argv does not start {start}"


# What a configuration may set in its servers' environment from a results.json alone (one may
# come from elsewhere: a CI artifact): SGLang's own switches and the GPUs a server sees. Anything
# else (OPENSSL_CONF, GCONV_PATH, PATH, LD_PRELOAD, PYTHONPATH, … whatever else a loader reads)
# is set only as the suite's own configuration (`--suite`) sets it; so is a value that names a
# file or directory, whatever its variable: a switch takes a number or a word, not a path.
CONFIG_ENV_PREFIXES = ("SGLANG_", "SGL_")
CONFIG_ENV_NAMES = ("CUDA_VISIBLE_DEVICES",)
_PATH_LIKE = re.compile(r"[/\\~]")


def configuration_may_set(name: str, value: str) -> bool:
    return (name.startswith(CONFIG_ENV_PREFIXES) or name in CONFIG_ENV_NAMES) and not _PATH_LIKE.search(value)


def get_target(name: str, python: str | None = None) -> Target:
    base = TARGETS[name]
    return base if python is None else dataclasses.replace(base, python=python)
