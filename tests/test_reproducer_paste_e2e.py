"""A *different* row's reproducer in report.md, run as a reviewer pasting it would: each side's
printed server line run by `sh` from the root of a checkout of its revision (in a temp dir, with
no PYTHONPATH of the test's and the venv's `python3` first on PATH), then the printed requests
block run by `sh` once, and the answers read for the difference the row states.

The configuration sets an environment variable (`SGLANG_SWA_EVICTION_INTERVAL`), which the
server that the pasted line starts must see. (An order-only change of a top-k list is now a
finding of the answer itself, `harness/answer_checks.py`, before any row compares lists.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import requests

from conftest import ROOT, planted, refserver_suite, run_pair
from fresh_servers import checkout
from harness.probes.common import swa_curve
from harness.probes.swa_peak import plateau
from harness.textfmt import fmt, fmt_pair

pytestmark = pytest.mark.slow

ENV_LINE = 'env = { SGLANG_SWA_EVICTION_INTERVAL = "16" }\n'  # a key of the [[config]] table


def sh_blocks(report: str, heading: str) -> list[list[str]]:
    """The ```sh blocks of one row's details (under `heading`), each as its lines."""
    section = report.split(heading, 1)[1].split("\n#### ", 1)[0]
    return [block.split("\n") for block in re.findall(r"```sh\n(.*?)\n```", section, re.S)]


def two_free_ports() -> int:
    """A port p with p and p + 1 free (the block puts the base on $PORT, the candidate on + 1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise AssertionError("no two consecutive free ports")


def reader_env(port: int) -> dict[str, str]:
    """A reader's shell: the venv's python3 first on PATH, no PYTHONPATH of ours, PORT set."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PORT")}
    return {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}", "PORT": str(port)}


def wait_healthy(port: int, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 180  # generous: a loaded two-core machine imports torch slowly
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline and server.poll() is None, log.read_text()[-3000:]
        time.sleep(0.3)


def answers_by_server(output: str) -> dict[int, list[dict]]:
    """The requests block's output: per server port (its `echo` line), the JSON answers in order
    (a flush answers with text, which is skipped)."""
    by_port: dict[int, list[dict]] = {}
    port = None
    for line in output.splitlines():
        marker = re.fullmatch(r"# the server on port (\d+)", line)
        if marker:
            port = int(marker.group(1))
            by_port[port] = []
            continue
        if port is not None and line.startswith("{"):
            by_port[port].append(json.loads(line))
    return by_port


@dataclass
class Pasted:
    answers: dict[str, list[dict]]  # each side's JSON answers, in order
    logs: dict[str, str]  # what each side's server logged while the requests were posted
    expect: str  # the row's Expect line


def pasted(repo, shas: dict[str, str], report: str, heading: str, where: Path) -> Pasted:
    """The row's printed blocks run as a reader would: each side's server line by `sh` from the
    root of a checkout of its revision under `where` (each checked to see the configuration's
    environment), then the requests block by `sh` once."""
    servers, posts = sh_blocks(report, heading)
    expect = report.split(heading, 1)[1].split("Expect: ", 1)[1].split("\n", 1)[0]
    port = two_free_ports()
    where.mkdir()
    started: list[subprocess.Popen] = []
    try:
        for offset, role in enumerate(("base", "candidate")):
            root = checkout(repo, shas[role], where / role).parent
            (i,) = [k for k, line in enumerate(servers) if line.startswith(f"# the {role}, ")]
            block = [line for line in servers[:i] if not line.startswith(("# ", "env ", "python3 "))] + servers[i:i + 2]
            log = where / f"{role}.log"
            with open(log, "w") as out:
                started.append(subprocess.Popen(["sh", "-e", "-c", "\n".join(block)], cwd=root, stdout=out,
                                                stderr=subprocess.STDOUT, env=reader_env(port),
                                                start_new_session=True))
            wait_healthy(port + offset, started[-1], log)
            server = next(p for p in psutil.Process(started[-1].pid).children(recursive=True)
                          if "refserver" in p.cmdline())
            assert server.environ().get("SGLANG_SWA_EVICTION_INTERVAL") == "16", servers  # the config's env
            assert server.cwd() == str(root)
        marks = {role: (where / f"{role}.log").stat().st_size for role in ("base", "candidate")}
        proc = subprocess.run(["sh", "-e", "-c", "\n".join(posts)], cwd=where, capture_output=True, text=True,
                              env=reader_env(port), timeout=300)
        assert proc.returncode == 0, proc.stderr
        answers = answers_by_server(proc.stdout)
        logs = {role: (where / f"{role}.log").read_bytes()[mark:].decode() for role, mark in marks.items()}
        return Pasted({role: answers[port + offset] for offset, role in enumerate(("base", "candidate"))}, logs,
                      expect)
    finally:
        for server in started:  # each server this test started, by its own process group
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)


SPECULATIVE = f"""mamba_track_interval = 16
speculative = {{ algorithm = "EAGLE", num_steps = 3, eagle_topk = 1, num_draft_tokens = 4 }}
{ENV_LINE}[config.draft]
refserver = "{ROOT / 'fixtures/refmodels/hybrid-draft'}"
[probe.accept_length]
suffix_len = 8
"""


def test_an_accept_length_row_gets_its_request_checked_by_its_accept_length_and_pasted_shows_it(tmp_path, no_leftovers):
    """`spec-accept` degrades the draft (greedy output unchanged): the row, decided by the exact
    accept length of one request, gets that request, verified by its accept length."""
    repo, base, cand = planted(tmp_path, "spec-accept")
    suite = refserver_suite(tmp_path / "s.toml", ["accept_length"], SPECULATIVE, prompts=2, prompt_len=(40, 60),
                            output_len=32)
    code, result, _ = run_pair(repo, base, cand, suite, tmp_path / "out")
    comp = next(c for c in result["comparisons"] if c["probe"] == "accept_length")
    assert code == 1 and comp["decided_by"] == "accept_length", comp["note"]
    rep = comp["reproducer"]
    assert rep["verification"]["reproduced"] == rep["verification"]["attempts"] >= 2, rep
    assert [r["what"] for r in rep["requests"]] == ["start cold", "turn 1 of prompt 0"], rep["requests"]

    report = (tmp_path / "out" / "report.md").read_text()
    seen = pasted(repo, {"base": base, "candidate": cand}, report, "#### det / `accept_length`", tmp_path / "paste")
    accepted, expect = {role: answers[0]["meta_info"]["spec_accept_length"] for role, answers in seen.answers.items()}, \
        seen.expect
    assert accepted["candidate"] < accepted["base"], accepted
    shown = fmt_pair(accepted["base"], accepted["candidate"])
    assert f"turn 1's accept length: base {shown[0]}, candidate {shown[1]}" in expect, expect


def test_an_swa_plateau_row_gets_its_request_read_from_the_log_and_pasted_holds_what_it_says(tmp_path, no_leftovers):
    """`swa-leak-one` keeps one token more than the window at each eviction: the plateau moves by
    one, the peak does not. The row gets its request, verified by the plateau its servers log;
    pasted, the servers run with the configuration's eviction interval (16: without it they
    would evict every 128 steps and hold other counts), and their logs show what Expect says."""
    repo, base, cand = planted(tmp_path, "swa-leak-one")
    suite = tmp_path / "swa.toml"
    suite.write_text((ROOT / "suites/demo-swa.toml").read_text().replace('"../fixtures', f'"{ROOT}/fixtures'))
    code, result, _ = run_pair(repo, base, cand, suite, tmp_path / "out", "--config", "no-spec")
    comp = next(c for c in result["comparisons"] if c["probe"] == "swa_peak")
    assert code == 1 and comp["decided_by"] == "swa_plateau", comp["note"]
    verification = comp["reproducer"]["verification"]
    assert verification["reproduced"] == verification["attempts"] >= 2, verification

    report = (tmp_path / "out" / "report.md").read_text()
    seen = pasted(repo, {"base": base, "candidate": cand}, report, "#### no-spec / `swa_peak`", tmp_path / "paste")
    curves = {role: swa_curve(log) for role, log in seen.logs.items()}
    plateaus = {role: plateau(curve) for role, curve in curves.items()}
    assert plateaus["candidate"] == plateaus["base"] + 1, plateaus
    for role, curve in curves.items():
        assert f"the {role}'s server logged {len(curve.held)} Decode lines: peak {max(curve.held)} SWA tokens held, " \
               f"plateau {fmt(plateaus[role])}" in seen.expect, seen.expect


def test_hits_that_reuse_less_get_the_hit_that_shows_it_checked_by_its_cached_tokens(tmp_path):
    """`cache-reuse-less` matches three quarters of the common prefix: every logprob the same, the
    hits reuse fewer tokens (the decode row's k3 reads different only by a hit it lost). Each row
    gets one prompt's seed and the turn that hits, checked by the cached_tokens it reports."""
    repo, base, cand = planted(tmp_path, "cache-reuse-less")
    suite = refserver_suite(tmp_path / "s.toml", ["prefill_cache_hit", "decode_cache_hit"], "mamba_track_interval = 16\n",
                            prompts=2, prompt_len=(40, 90), output_len=32)
    code, result, _ = run_pair(repo, base, cand, suite, tmp_path / "out")
    assert code == 1
    for probe in ("prefill_cache_hit", "decode_cache_hit"):
        rep = next(c for c in result["comparisons"] if c["probe"] == probe)["reproducer"]
        assert rep["first_divergent"]["what"] == "cached_tokens of the turn that hits", rep
        assert [r["path"] for r in rep["requests"]] == ["/flush_cache", "/generate", "/generate"], rep["requests"]
        v = rep["verification"]
        assert v["reproduced"] == v["attempts"] >= 2, v
        shown = re.fullmatch(r"the turn that hits the cache reported cached_tokens (\d+) on the base, (\d+) on the "
                             r"candidate", v["observed"])
        assert shown and int(shown.group(2)) < int(shown.group(1)), v["observed"]
