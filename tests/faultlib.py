"""Helpers of the fault and bad-input tests.

A `Bench` is one test's world: a git repo whose `sglang.launch_server` is the fault server
(fixtures/faults), a suite of configurations each failing its own way, and the `detcheck run`
command over them, with the fault server under a bare interpreter (conftest's `bare_python`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT, detcheck, detcheck_argv, make_sglang_repo

MODEL = ROOT / "fixtures" / "refmodels" / "hybrid"


def suite_text(configs: dict[str, list[str]], state: Path, *, startup_timeout_s: float = 60,
               request_timeout_s: float = 60, env: dict[str, str] | None = None) -> str:
    """A tiny suite: one deterministic kl configuration per entry, its args plus its own --state."""
    lines = ['name = "faults"', "[models]", f'sglang = "{MODEL}"', "[server]",
             f"startup_timeout_s = {startup_timeout_s}", f"request_timeout_s = {request_timeout_s}"]
    if env:
        lines += ["[server.env]", *(f"{k} = {json.dumps(v)}" for k, v in env.items())]
    lines += ["[workload]", "prompts = 2", "prompt_len = [8, 12]", "output_len = 4"]
    for name, args in configs.items():
        lines += ["[[config]]", f'name = "{name}"', "deterministic = true",
                  'probes = ["kl"]',
                  f"args = {json.dumps([*args, '--state', str(state / name)])}"]
    return "\n".join(lines) + "\n"


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@dataclass
class Bench:
    root: Path
    python: str
    repo: Path | None = None

    def __post_init__(self) -> None:
        self.repo = self.repo or make_sglang_repo(self.root, module="faults")
        self.suite = self.root / "suite.toml"
        self.out = self.root / "out"
        self.state = self.root / "state"

    def write_suite(self, configs: dict[str, list[str]], **fields) -> Path:
        self.suite.write_text(suite_text(configs, self.state, **fields))
        return self.suite

    def args(self, *extra: str) -> list[str]:
        return ["run", "--target", "sglang", "--repo", str(self.repo), "--base", "main~1",
                "--candidate", "main", "--suite", str(self.suite), "--out", str(self.out),
                "--python", self.python, "--format", "json", "--no-progress", *extra]

    @staticmethod
    def env() -> dict[str, str]:
        return {"PYTHONPATH": str(ROOT / "fixtures")}  # where the shim finds the fault server

    def run(self, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return detcheck(*self.args(*extra), env=self.env(), timeout=timeout)

    def resume(self, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """`detcheck run --resume --out <out>`: the run's own options come from its results.json,
        the servers' interpreter given again as the run had it (a resume runs none unasked)."""
        return detcheck("run", "--resume", "--out", str(self.out), "--python", self.python, "--format", "json",
                        "--no-progress", *extra,
                        env=self.env(), timeout=timeout)

    def start(self, *extra: str, command: tuple[str, ...] = (), env: dict[str, str] | None = None) -> subprocess.Popen:
        """`detcheck run` in the background (`command`: a wrapper such as nohup). SIGINT and
        SIGHUP are the default in the child however the suite was started: a test suite run in
        the background (`pytest &` from a script, `nohup pytest`) inherits them ignored, and the
        interrupt tests would then measure the test runner's environment, not detcheck."""
        return subprocess.Popen([*command, *detcheck_argv(*self.args(*extra))], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**os.environ, **self.env(), **(env or {})}, preexec_fn=_default_signals)

    def result(self) -> dict:
        return json.loads((self.out / "results.json").read_text())

    def why(self, proc: subprocess.CompletedProcess) -> str:
        """What an assertion on a run's exit shows: each cell that did not end ok, with its
        reason (a timeout names itself there), then the end of stderr."""
        try:
            failed = [f"{c['config']} @ {c['role']}: {c['status']}: {c['reason']}"
                      for c in self.result()["cells"] if c["status"] != "ok"]
        except (OSError, ValueError):
            failed = ["(no results.json)"]
        return "\n".join([*failed, proc.stderr[-2000:]])

    def launches(self, config: str) -> list[dict]:
        """What each launch of `config`'s server recorded (pid, child pid), in order."""
        files = sorted((self.state / config).glob("launch-*.json"), key=lambda p: int(p.stem[7:]))
        return [json.loads(p.read_text()) for p in files]

    def wait_launches(self, config: str, n: int, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.launches(config)) < n:
            assert time.monotonic() < deadline, f"{config}: fewer than {n} launches"
            time.sleep(0.05)


def cells(result: dict, config: str) -> list[dict]:
    return [c for c in result["cells"] if c["config"] == config]


def interrupt(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 150) -> str:
    """Signal a running detcheck and return its stderr once it has exited (`timeout`: generous,
    as a loaded two-core machine needs; a run that waits out a server's startup or a suite's
    request timeout after the signal still exceeds it where those are long)."""
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=timeout)
    return err
