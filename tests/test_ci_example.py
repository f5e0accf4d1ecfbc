"""ci/github-actions-matrix.yml, run: each job's steps' shell commands, in order, as GitHub's
runner runs them (`bash --noprofile --norc -eo pipefail`), against the reference server, so that
the example cannot rot. What only GitHub does is done here by hand: checkouts (a fixture repo
stands in for SGLang's), installs (the steps that `pip install` are left out: these tests run in
the environment they would make, linked as `.venv`), and the artifacts (each job's `runs/` copied
where download-artifact puts it). A GPU entry's job is not run: it needs its GPUs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from harness.fixture_repo import FixtureRepo
from harness.matrix import gpu_names, load_matrix

WORKFLOW = ROOT / "ci" / "github-actions-matrix.yml"
# What a job's commands read from the checkout (linked, never written: they write runs/ and
# combined.md into the job's own directory).
CHECKOUT = ("noxfile.py", "matrix.toml", "pyproject.toml", "ci", "suites", "harness", "fixtures", "constraints")


def steps(text: str) -> dict[str, list[str]]:
    """Each job's `run:` scripts, in order (the workflow's own layout: `run: CMD` or `run: |`,
    the block as indented as its first line)."""
    jobs: dict[str, list[str]] = {}
    job = None
    lines = text.split("\njobs:\n", 1)[1].splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := re.match(r"^  ([a-z_]+):$", line):
            job = m.group(1)
            jobs[job] = []
        elif job and (m := re.match(r"^\s+(?:- )?run: (.*)$", line)):
            if m.group(1) != "|":
                jobs[job].append(m.group(1) + "\n")
            else:
                block = []
                indent = len(lines[i + 1]) - len(lines[i + 1].lstrip())
                while i + 1 < len(lines) and (not lines[i + 1].strip() or lines[i + 1].startswith(" " * indent)):
                    i += 1
                    block.append(lines[i][indent:])
                jobs[job].append("\n".join(block).strip() + "\n")
        i += 1
    return jobs


def checkout(root: Path) -> Path:
    root.mkdir(parents=True)
    for name in CHECKOUT:
        (root / name).symlink_to(ROOT / name)
    (root / ".venv").symlink_to(Path(sys.prefix))
    return root


def run_steps(scripts: list[str], cwd: Path, env: dict[str, str]) -> list[subprocess.CompletedProcess]:
    """The scripts that install nothing, in order, until one fails (as a job stops)."""
    done = []
    for script in scripts:
        if "pip install" in script:
            continue
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd,
                              capture_output=True, text=True, timeout=1800, env={**os.environ, **env})
        done.append(proc)
        if proc.returncode != 0:
            break
    return done


def test_the_workflow_is_read_as_three_jobs_of_commands():
    jobs = steps(WORKFLOW.read_text())
    assert list(jobs) == ["entries", "validate", "report"]
    assert all("|| echo" not in script for scripts in jobs.values() for script in scripts)  # a failure fails
    installs = [s for scripts in jobs.values() for s in scripts if "pip install" in s]
    assert len(installs) == 3 and all("-c constraints/cpu.txt" in s for s in installs)


@pytest.mark.slow
def test_the_workflows_commands_run_the_cpu_entry_and_the_report_fails_on_an_absent_run(tmp_path):
    jobs = steps(WORKFLOW.read_text())
    summary = tmp_path / "summary.md"
    github = {"GITHUB_STEP_SUMMARY": str(summary), "DETCHECK_CACHE_DIR": str(tmp_path / "cache")}

    # entries: the matrix, as the job's output
    output = tmp_path / "github-output"
    listed = run_steps(jobs["entries"], checkout(tmp_path / "entries"), {**github, "GITHUB_OUTPUT": str(output)})
    assert [p.returncode for p in listed] == [0], listed[-1].stderr
    (line,) = output.read_text().splitlines()
    matrix = json.loads(line.removeprefix("matrix="))
    entries = {e.name: e for e in load_matrix(ROOT / "matrix.toml").entries}

    # validate: one job per row, on a fresh runner each; its runs/ become the artifact
    artifacts = tmp_path / "artifacts"
    ran, not_run = [], {}
    for row in matrix["include"]:
        why_not = [entries[job.split("-", 1)[0] if job not in entries else job].missing(gpu_names())
                   for job in row["jobs"]]
        if row["label"] != "cpu":
            not_run[row["entry"]] = why_not  # needs its GPUs: not run here
            assert all(why_not), row
            continue
        work = checkout(tmp_path / f"validate-{row['entry']}")
        repo = FixtureRepo.create(work / "sglang")  # actions/checkout of the SGLang repo
        base = repo.head()
        candidate = repo.note("a harmless change")
        done = run_steps(jobs["validate"], work, {**github, "JOBS": " ".join(row["jobs"]), "LABEL": row["label"],
                                                   "BASE": base, "CANDIDATE": candidate, "SGLANG_PYTHON": ""})
        assert [p.returncode for p in done] == [0], done[-1].stdout[-2000:] + done[-1].stderr[-3000:]
        for job in row["jobs"]:
            junit = (work / "runs" / job / "junit.xml").read_text()
            assert "<testsuites>" in junit and 'failures="0"' in junit
        shutil.copytree(work / "runs", artifacts / f"detcheck-{row['entry']}")
        ran.append(row)
    assert ran and not_run  # the CPU entry ran; the GPU entries were left out, each saying why

    # report: the combined table, judged; an expected job without a run fails it
    work = checkout(tmp_path / "report")
    (work / "runs").symlink_to(artifacts)
    failed = run_steps(jobs["report"], work, {**github, "MATRIX": json.dumps(matrix)})
    assert [p.returncode for p in failed] == [1]
    for row in matrix["include"]:
        for job in row["jobs"]:
            absent = f"job {job}: no run under runs" in failed[0].stderr
            assert absent == (row not in ran), (job, failed[0].stderr)
    assert "Verdict: same" in (work / "combined.md").read_text() and "Verdict: same" in summary.read_text()
    passed = run_steps(jobs["report"], work, {**github, "MATRIX": json.dumps({"include": ran})})
    assert [p.returncode for p in passed] == [0], passed[0].stderr
