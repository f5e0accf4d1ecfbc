"""Reports rendered from checked-in results JSON must match the golden files byte for byte.

The JSON files are real runs: demo-cache.json from `detcheck demo --json`, h200-pools.json and
h200-swa-dflash.json (an SWA curve: its sparkline) from the H200 runs in results/h200/pools and
results/h200/swa-dflash, revision-kl.json from `detcheck run` of the kl and revision_kl probes
(3 prompts, output_len 6) on a reference-server repository whose candidate carries the planted
`logit-scale` (its report shows a reproducer; per-row-argv.md renders it with a second
configuration whose sides start other servers), softcap-verified.json from `detcheck run` of kl,
prefill_cache_hit and revision_kl (2 prompts of 100-110 tokens, output_len 32) whose candidate
carries `softcap-128`: each row's reproducer verified on relaunched servers, grown back past the
samples' cut to where the change bites. The stored reproducers of the older files were
re-derived when the expectation learned to quote each side's samples, and carry no verification
(their reports say so). Regenerate the golden files after an intended change with
`UPDATE_GOLDEN=1 pytest tests/test_golden.py` and review the diff.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shlex
import subprocess

import pytest
from rich.console import Console

from conftest import DATA, detcheck
from harness.report.console import ConsoleReport
from harness.report.markdown import MarkdownReport
from harness.result_files import read_run, upgraded
from harness.redaction import REDACTED
from harness.results import RunResult

CASES = ["demo-cache", "h200-pools", "h200-swa-dflash", "revision-kl", "softcap-verified", "throughput-level"]


def load(name: str) -> RunResult:
    """A golden run as its run ended: these files were written before results recorded their
    plan (schema 4), each by a run that finished every pair it set out to measure; read back
    plan-less they are no pass (a report says so: tests/test_complete_record_e2e.py), so the
    plan each run would have recorded, marked complete, is given back to it here."""
    return finished(read_run(DATA / f"{name}.json"))


def finished(result: RunResult) -> RunResult:
    """`result` with the plan of the cells it holds, marked complete by its last step."""
    from harness.results import RunPlan

    plan = RunPlan(run_id="golden", cells=tuple((c.config, c.probe, c.role) for c in result.cells),
                   probe_params=result.metadata.get("probe_params") or {}, complete=True)
    return dataclasses.replace(result, plan=plan)


def write_finished(name: str, run_dir) -> None:
    """A golden run's results.json (with the plan its run finished: `finished`) in `run_dir`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.json").write_text(json.dumps(load(name).to_dict()))


def check_golden(path, text: str) -> None:
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path.name} differs; UPDATE_GOLDEN=1 regenerates it"


@pytest.mark.parametrize("name", CASES)
def test_markdown_golden(name):
    check_golden(DATA / f"{name}.md", MarkdownReport(load(name)).render())


@pytest.mark.parametrize("name", CASES)
def test_junit_golden(name):
    from xml.etree import ElementTree

    from harness.report.junit import junit_xml

    text = junit_xml(load(name))
    check_golden(DATA / f"{name}.junit.xml", text)
    suite = ElementTree.fromstring(text.encode())  # well-formed, and its counts are its cases'
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) == len(load(name).comparisons)
    assert int(suite.get("failures")) == sum(case.find("failure") is not None for case in cases)


@pytest.mark.parametrize("name", CASES)
def test_console_golden(name):
    buf = io.StringIO()
    ConsoleReport(load(name)).print(Console(file=buf, width=160, color_system=None))
    check_golden(DATA / f"{name}.console.txt", buf.getvalue())


def per_row_argv_run() -> RunResult:
    """revision-kl.json with a second configuration, `graphs`, whose servers take more flags
    (its candidate one more than its base) from a model directory whose name needs quoting."""
    data = json.loads((DATA / "revision-kl.json").read_text())
    flags = {"base": ["--cuda-graph-max-bs", "8"], "candidate": ["--cuda-graph-max-bs", "8", "--enable-torch-compile"]}
    for cell in [json.loads(json.dumps(c)) for c in data["cells"]]:
        argv = cell["metadata"]["server_argv"]
        argv[argv.index("--model-path") + 1] = "models/tiny llama's"
        data["cells"].append({**cell, "config": "graphs",
                              "metadata": {**cell["metadata"], "server_argv": argv + flags[cell["role"]]}})
    data["launches"] += [{**launch, "config": "graphs"} for launch in data["launches"]]
    data["comparisons"] += [{**comp, "config": "graphs"} for comp in data["comparisons"]]
    return finished(RunResult.from_dict(data))


def test_each_rows_reproducer_starts_that_rows_servers_shell_quoted():
    """A reviewer reproducing the `graphs` row starts `graphs` servers, each side its own."""
    text = MarkdownReport(per_row_argv_run()).render()
    check_golden(DATA / "per-row-argv.md", text)
    det, graphs = text.split("#### graphs / `revision_kl`")
    det = det.split("#### det / `revision_kl`")[1]
    assert "--cuda-graph-max-bs" not in det and det.count("python3 -m refserver") == 2  # a line per side
    base, cand = (line for line in graphs.splitlines() if line.startswith("env "))
    model = shlex.quote("models/tiny llama's")
    assert base == (f'env PYTHONPATH=python python3 -m refserver --model-path {model} --host 127.0.0.1 '
                    '--port "$BASE_PORT" --enable-deterministic-inference --cuda-graph-max-bs 8')
    assert cand == base.replace('"$BASE_PORT"', '"$CANDIDATE_PORT"') + " --enable-torch-compile"
    # Provenance: a line per configuration, a line per side where the sides' flags differ.
    provenance = text.split("<summary>Provenance</summary>")[1]
    assert [line.split(":")[0] for line in provenance.splitlines() if line.startswith("- server args")] == [
        "- server args (det)", "- server args (graphs @ base)", "- server args (graphs @ candidate)"]


def test_round_trip_is_lossless():
    data = upgraded(DATA / "demo-cache.json", "results", json.loads((DATA / "demo-cache.json").read_text()))
    assert RunResult.from_dict(data).to_dict() == data


def test_report_command_prints_the_stored_table(tmp_path):
    run_dir = tmp_path / "run"
    write_finished("demo-cache", run_dir)
    proc = detcheck("report", str(run_dir), "--format", "md")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (DATA / "demo-cache.md").read_text()
    assert (run_dir / "report.md").read_text() == proc.stdout


def test_report_check_will_not_vouch_for_verdicts_it_cannot_judge_again(tmp_path):
    """demo-cache.json was written before results recorded their judging parameters: rendered as
    stored, but `--check` (a verdict asked of it) is exit 2, never the stored verdict trusted."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text((DATA / "demo-cache.json").read_text())
    proc = detcheck("report", str(run_dir), "--format", "md", "--check")
    assert proc.returncode == 2, proc.stderr
    assert "records no judging parameters (written by harness 0.1.0): its verdicts cannot be judged again" in proc.stderr


ABSOLUTE_PATH = re.compile(r"(?<![\w.~/…-])/(?:[\w.-]+/)+[\w.-]*")


@pytest.mark.parametrize("name", CASES)
def test_a_report_holds_no_absolute_path_of_the_machine_but_the_model_its_server_lines_start(name):
    """Pasted into a PR, report.md says nothing of where the run was made (the results hold
    /work/… and /tmp/… paths: the model's, the worktrees', the command's), but for the model
    path of a reproducer's server line: that line runs as printed, the model as the run used it."""
    run = load(name)
    assert ABSOLUTE_PATH.findall(json.dumps(run.to_dict()))  # the stored run holds some
    markdown = (DATA / f"{name}.md").read_text()
    models = {c.metadata["server_argv"][c.metadata["server_argv"].index("--model-path") + 1]
              for c in run.cells if "--model-path" in c.metadata.get("server_argv", ())}
    server_lines = [line for line in markdown.splitlines() if line.startswith(("env ", "python3 "))]
    elsewhere = [line for line in markdown.splitlines() if line not in server_lines]
    assert not ABSOLUTE_PATH.findall("\n".join(elsewhere)), ABSOLUTE_PATH.findall("\n".join(elsewhere))
    assert set(ABSOLUTE_PATH.findall("\n".join(server_lines))) <= models, server_lines
    assert markdown == MarkdownReport(run).render()


def test_a_record_whose_cells_were_removed_says_so_above_its_table():
    result = dataclasses.replace(load("demo-cache"), cells=())
    plain = MarkdownReport(result).render()
    assert "holds no cells" not in plain  # every side reads "–": without the line, as if nothing ran
    trimmed = dataclasses.replace(result, metadata={**result.metadata, "trimmed": "kept for its timing"})
    text = MarkdownReport(trimmed).render()
    assert "*This record holds no cells: kept for its timing.*" in text
    assert text.index("holds no cells") < text.index("| configuration |")


def test_combined_report_golden(tmp_path):
    """Several runs (a matrix's suites or entries) as one Markdown report, in the order given."""
    runs = ["demo-cache", "revision-kl"]
    for name in runs:
        write_finished(name, tmp_path / name)
    proc = detcheck("report", *runs, "--format", "md", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    check_golden(DATA / "combined.md", proc.stdout)
    # files written before their judging parameters were: no verdict is vouched for
    assert detcheck("report", *runs, "--format", "md", "--check", cwd=tmp_path).returncode == 2


def test_a_throughput_rows_command_runs_only_what_it_says(tmp_path):
    """throughput-level.json's row (no request shows a level: its reproducer is the command that
    measures it again) with a hostile repository, suite, configuration and --set value: pasted
    into sh, the block runs `detcheck run` with exactly its words, and nothing else."""
    data = json.loads((DATA / "throughput-level.json").read_text())
    hostile = "x $(touch pwned) `touch pwned2` 'q\" ; touch pwned3"
    options = data["metadata"]["options"]
    options.update(repo=f"/r/{hostile}", suite=f"/s/{hostile}.toml", overrides=[f"throughput.warmup=0 {hostile}"])
    rep = data["comparisons"][0]["reproducer"]
    rep["command"][1] = f"det {hostile}"
    text = MarkdownReport(RunResult.from_dict(data)).render()
    block = text.split("Measure it again")[1].split("```sh\n")[1].split("\n```")[0]
    assert subprocess.run(["sh", "-n", "-c", block]).returncode == 0
    # `detcheck` a function that prints its words, one per line: what the pasted block runs
    shown = subprocess.run(["sh", "-c", 'detcheck() { for w in "$@"; do printf "%s\\0" "$w"; done; }\n' + block],
                           cwd=tmp_path, capture_output=True, check=True).stdout.decode().split("\0")[:-1]
    assert list(tmp_path.iterdir()) == []  # nothing ran but the function
    assert shown[:3] == ["run", "--repo", f"…/{hostile}"]  # the repository's path made portable, one word
    assert ["--config", f"det {hostile}", "--probe", "throughput", "--set", "throughput.concurrency=[2]"] == \
        shown[shown.index("--config"):shown.index("--config") + 6]
    assert ["--set", f"throughput.warmup=0 {hostile}"] == shown[shown.index("--target") + 2:shown.index("--target") + 4]
    assert shlex.split(block.splitlines()[-1])[shlex.split(block.splitlines()[-1]).index("--config") + 1] == f"det {hostile}"


def test_combined_report_over_two_matrix_entries_golden(tmp_path):
    """The CI example's last job (ci/github-actions-matrix.yml): one table for every entry, from
    each entry's run directories as the artifacts lay them out. entry-two.json and
    entry-four.json are `detcheck matrix run` of one TP=2 suite (kl, and an interleaved
    throughput) on a 2-"GPU" entry (sides in turn: its row says so) and a 4-"GPU" one (side by
    side), from tests/test_gpus_per_server_e2e.py, paths scrubbed."""
    runs = []
    for entry in ("two", "four"):
        write_finished(f"entry-{entry}", tmp_path / entry / "tp2")
        runs.append(f"{entry}/tp2")
    proc = detcheck("report", *runs, "--format", "md", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    check_golden(DATA / "combined-entries.md", proc.stdout)
    # --check judges each run with its suite's parameters (a temporary file, not here): no
    # verdict is vouched for
    check = detcheck("report", *runs, "--format", "md", "--check", cwd=tmp_path)
    assert check.returncode == 2 and "the suite the run names ('/tmp/detcheck/tp2.toml') is not here" in check.stderr
    assert "sides measured in turn" in proc.stdout.split("### ")[1] and "in turn" not in proc.stdout.split("### ")[2]


def test_a_server_line_runs_as_the_run_started_it_from_the_root_of_a_checkout(tmp_path):
    """The configuration's environment (a redacted value read from the reader's own), the
    revision's code on PYTHONPATH in front of the configuration's own, a worktree's file as its
    path in the checkout, any other path as the run used it; run by `sh`, the server (a stub)
    gets exactly that."""
    from harness.report.markdown import server_line

    worktree = "/cache/detcheck/worktrees/repo-1a2b/0123456789ab"
    argv = ["-m", "refserver", "--model-path", "/models/tiny llama", "--port", "4000",
            "--chat-template", f"{worktree}/python/templates/chat.jinja"]
    env = {"SGLANG_SWA_EVICTION_INTERVAL": "16", "HF_TOKEN": REDACTED, "SGLANG_NOTE": "a b'c",
           "PYTHONPATH": "/opt/extra", "LD_PRELOAD": "/tmp/x.so"}
    line = server_line("refserver", argv, env, "python", "$CANDIDATE_PORT")
    # A results file may not set a loader's variable or a path: named, left out of the command.
    assert line == ("# left out: PYTHONPATH, LD_PRELOAD, which results.json sets for the server and a results "
                    "file may not (it may change what code runs): add it yourself if you trust the file\n"
                    "env SGLANG_SWA_EVICTION_INTERVAL=16 \"HF_TOKEN=$HF_TOKEN\" 'SGLANG_NOTE=a b'\"'\"'c' "
                    "PYTHONPATH=python python3 -m refserver --model-path '/models/tiny llama' "
                    "--port \"$CANDIDATE_PORT\" --chat-template python/templates/chat.jinja")
    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir()
    stub.write_text(f"#!/bin/sh\nenv > '{tmp_path}/env'\nprintf '%s\\n' \"$@\" > '{tmp_path}/argv'\n")
    stub.chmod(0o755)
    proc = subprocess.run(["sh", "-c", f"CANDIDATE_PORT=4001\n{line}"], capture_output=True, text=True,
                          env={"PATH": f"{stub.parent}:/usr/bin:/bin", "HF_TOKEN": "sk-reader"})
    assert proc.returncode == 0, proc.stderr
    seen = dict(row.split("=", 1) for row in (tmp_path / "env").read_text().splitlines() if "=" in row)
    assert {k: seen.get(k) for k in env} == {"SGLANG_SWA_EVICTION_INTERVAL": "16", "HF_TOKEN": "sk-reader",
                                             "SGLANG_NOTE": "a b'c", "PYTHONPATH": "python", "LD_PRELOAD": None}
    assert (tmp_path / "argv").read_text().splitlines() == [
        "-m", "refserver", "--model-path", "/models/tiny llama", "--port", "4001", "--chat-template",
        "python/templates/chat.jinja"]


def test_the_console_table_takes_a_terminals_width_and_200_columns_elsewhere():
    """In a 100-column terminal a 200-column table wrapped each of its lines; in a CI log or a
    file there is no width to take."""
    import fcntl
    import pty
    import struct
    import termios

    from harness.report.emit import PIPED_WIDTH, console_width

    assert console_width(io.StringIO()) == PIPED_WIDTH == 200
    leader, follower = pty.openpty()
    try:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        with open(follower, "w", closefd=False) as terminal:
            assert console_width(terminal) == 100
    finally:
        os.close(leader)
        os.close(follower)


def test_a_killed_runs_reports_say_it_is_no_pass_first_golden():
    """killed-run.json: `detcheck run` of four configurations (kl; the planted `rename`, which
    changes nothing served) killed by SIGTERM once its first pair was recorded, as a CI job at its
    time limit leaves it (paths scrubbed). Its one row reads same; report.md, the console table
    and the JUnit file each say first that the record is no pass, list what it lacks, and show the
    three pairs it never measured as rows that read missing."""
    from xml.etree import ElementTree

    from harness.report.junit import junit_xml

    result = read_run(DATA / "killed-run.json")
    markdown = MarkdownReport(result).render()
    check_golden(DATA / "killed-run.md", markdown)
    verdict = markdown.splitlines()[2]
    assert verdict.startswith("**Verdict: not a pass: the record is incomplete (4 gaps, listed below); "
                              "as recorded: same (1 same)"), verdict
    assert "- c3 / kl: no base cell, no candidate cell, no comparison row" in markdown.split("| configuration |")[0]
    assert ("| c3 | `kl` | – | – | ⛔ missing | not judged by this run: no base cell, no candidate cell, "
            "no comparison row |") in markdown
    buf = io.StringIO()
    ConsoleReport(result).print(Console(file=buf, width=160, color_system=None))
    check_golden(DATA / "killed-run.console.txt", buf.getvalue())
    assert "verdict: not a pass: the record is incomplete" in buf.getvalue()
    assert "not a pass: c2 / kl: no base cell, no candidate cell, no comparison row" in buf.getvalue()
    text = junit_xml(result)
    check_golden(DATA / "killed-run.junit.xml", text)
    suite = ElementTree.fromstring(text.encode())
    failed = {(case.get("classname"), case.get("name")): case.find("failure") for case in suite.findall("testcase")}
    assert int(suite.get("tests")) == len(failed) == 5 and int(suite.get("failures")) == 4
    assert failed[("record", "complete")].get("type") == "incomplete" and failed[("c0", "kl")] is None
    assert all(failed[(f"c{i}", "kl")].get("type") == "missing" for i in (1, 2, 3))


def test_a_long_list_of_gaps_is_cut_and_counted():
    """A record short of many pairs names the first `completeness.SHOWN`, then counts the rest."""
    from harness.completeness import SHOWN
    from harness.results import RunPlan

    result = read_run(DATA / "killed-run.json")
    plan = result.plan
    assert plan is not None
    many = dataclasses.replace(result, plan=dataclasses.replace(
        plan, cells=plan.cells + tuple((f"x{i}", "kl", role) for i in range(20) for _, _, role in plan.cells[:2])))
    assert isinstance(many.plan, RunPlan)
    markdown = MarkdownReport(many).render()
    listed = [line for line in markdown.split("| configuration |")[0].splitlines() if line.startswith("- ")]
    assert len(listed) == SHOWN + 1 and listed[-1] == f"- and {4 + 20 - SHOWN} more", listed
    assert markdown.count("⛔ missing") == 23  # every pair it lacks is a row, however many


def test_a_combined_reports_title_says_a_run_is_no_pass_and_counts_each_runs_verdict():
    """Seen: `report D1 D2` over a finished run and a killed one titled the set by the rows it
    had ("2 runs: different"), and a run that measured nothing read as part of a *same* set."""
    from pathlib import Path

    from harness.report.combined import combined_markdown

    killed = read_run(DATA / "killed-run.json")
    title = combined_markdown([(Path("a"), load("demo-cache")), (Path("b"), killed)]).splitlines()[0]
    assert title == "## detcheck: 2 runs: not a pass (1 of 2 runs incomplete); as recorded: different (1 different, 1 same)"
    nothing = dataclasses.replace(killed, comparisons=tuple(dataclasses.replace(c, verdict="n/a") for c in killed.comparisons),
                                  plan=dataclasses.replace(killed.plan, complete=True, cells=killed.plan.cells[:2]))
    title = combined_markdown([(Path("a"), load("revision-kl")), (Path("b"), nothing)]).splitlines()[0]
    assert title == "## detcheck: 2 runs: different (1 different, 1 nothing measured)", title
