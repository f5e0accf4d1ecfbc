"""A reproducer posted as a reviewer would: a fresh server of each side started from a checkout
of its revision with the cell's recorded argv, and the reproducer's curl lines run against it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import requests

from harness.fixture_repo import FixtureRepo
from harness.server import free_port  # below the ephemeral range: see its docstring


def checkout(repo: FixtureRepo, sha: str, dst: Path) -> Path:
    archive = dst.with_suffix(".tar")
    subprocess.run(["git", "-C", str(repo.path), "archive", "--output", str(archive), sha], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dst, filter="data")
    return dst / "python"


def post_reproducer(argv: list[str], pythonpath: Path, rep: dict, log: Path) -> list[dict]:
    """A fresh server from the cell's argv (on a free port), the reproducer's curl lines run
    against it in order (a replay that follows an answer with that answer's output ids); the
    JSON answers."""
    port = free_port()
    argv = [*argv]
    argv[argv.index("--port") + 1] = str(port)
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=subprocess.STDOUT,
                                  env={**os.environ, "PYTHONPATH": str(pythonpath)}, cwd=pythonpath)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, log.read_text()[-2000:]
            time.sleep(0.2)
        answers = []
        for request in rep["requests"]:
            curl = [a.replace("127.0.0.1:30000", f"127.0.0.1:{port}") for a in shlex.split(request["curl"])]
            if request.get("follows"):  # a replay of this side's own answer, as its `what` says
                k, n = request["follows"]
                body = {**request["body"], "input_ids": request["body"]["input_ids"][:n] + answers[k]["output_ids"]}
                curl[curl.index("-d") + 1] = json.dumps(body)
            proc = subprocess.run(curl, capture_output=True, text=True, timeout=120, check=True)
            answers.append(json.loads(proc.stdout) if request["path"] == "/generate" else proc.stdout)
        return answers
    finally:
        server.terminate()
        server.wait(timeout=30)
