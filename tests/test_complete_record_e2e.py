"""A pass is proven, never what is left when nothing was found (issue 44, parts 1 and 5): a record
knows what it set out to measure and whether its run finished, and `report --check` judges it
with its suite's parameters. Each test is one "what was seen" of the issue, on the reference
server: the record that used to read *same* with exit 0 now says what is missing or changed and
does not pass."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, detcheck, detcheck_argv, planted, refserver_suite, run_pair

pytestmark = pytest.mark.slow

TRACK = "mamba_track_interval = 16\n"


def params_of(result: dict) -> dict:
    """The judging parameters as the file stores them (a record's plan holds them)."""
    return result["plan"]["probe_params"] if "plan" in result else result["metadata"]["probe_params"]


def rejudged(out: Path, result: dict) -> list[dict]:
    """`result`'s rows as its stored cells and (doctored) stored parameters give them: a
    doctoring a re-judging cannot tell from the file alone."""
    from harness.compare import compare_run
    from harness.probes import PROBES
    from harness.results import RunResult

    run = RunResult.from_dict(result)
    params = {p: PROBES[p].validate({k: v for k, v in raw.items() if v is not None}, p)
              for p, raw in params_of(result).items()}
    return [c.to_dict() for c in compare_run(run.cells, params, [(c.config, c.probe) for c in run.comparisons])]


def check(out: Path, result: dict, name: str) -> subprocess.CompletedProcess:
    """`report --check` of `result` written into a copy of the run's folder."""
    where = out.parent / name
    where.mkdir()
    (where / "results.json").write_text(json.dumps(result))
    return detcheck("report", str(where), "--check")


@pytest.fixture(scope="module")
def cache_run(tmp_path_factory):
    """The planted cache regression under deterministic mode: kl reads same, prefill_cache_hit
    different (its k3 and first_divergent; its hit fraction and cached tokens equal)."""
    tmp = tmp_path_factory.mktemp("cache-run")
    repo, base, cand = planted(tmp, "cache")
    suite = refserver_suite(tmp / "s.toml", ["kl", "prefill_cache_hit"], TRACK, prompt_len=(40, 90), output_len=8)
    # module-scoped: before the per-test cache exists, so it gets its own
    code, result, _ = run_pair(repo, base, cand, suite, tmp / "out", env={"DETCHECK_CACHE_DIR": str(tmp / "cache")})
    assert code == 1 and [c["verdict"] for c in result["comparisons"]] == ["same", "different"]
    return tmp / "out", result


def test_report_check_rejudges_a_trimmed_record_that_holds_cells(cache_run):
    """Seen: any `metadata.trimmed` key skipped re-judging although the cells were there ("holds
    no cells" beside "8 measured"): a flipped verdict passed."""
    out, result = cache_run
    doctored = json.loads(json.dumps(result))
    doctored["metadata"]["trimmed"] = "kept for its timing"
    doctored["comparisons"][1]["verdict"] = "same"
    proc = check(out, doctored, "trimmed")
    assert proc.returncode == 2, proc.stderr
    assert "det / prefill_cache_hit: stored same, its samples give different" in proc.stderr


def test_report_check_of_a_record_with_a_row_deleted_names_the_pair(cache_run):
    """Seen: a row deleted from `comparisons` left its cells unjudged, and the rest passed."""
    out, result = cache_run
    doctored = json.loads(json.dumps(result))
    del doctored["comparisons"][1]
    proc = check(out, doctored, "row-dropped")
    assert proc.returncode == 1, proc.stderr
    assert "not a pass: det / prefill_cache_hit: no comparison row" in proc.stderr


def test_report_check_names_verdict_metrics_narrowed_in_the_file(cache_run):
    """Seen: `verdict_metrics` narrowed inside the file (rows judged again to match) was
    trusted, and a narrowed row showed a bare pass with no "changed, not deciding"."""
    out, result = cache_run
    doctored = json.loads(json.dumps(result))
    params_of(doctored)["prefill_cache_hit"]["verdict_metrics"] = ["hit_fraction"]
    params_of(doctored)["kl"]["verdict_metrics"] = ["k3"]
    doctored["comparisons"] = rejudged(out, doctored)
    assert [c["verdict"] for c in doctored["comparisons"]] == ["same", "same"]
    narrowed = doctored["comparisons"][1]
    assert narrowed["changed_not_deciding"] == ["k3", "first_divergent"]  # the row shows what changed
    proc = check(out, doctored, "narrowed")
    assert proc.returncode == 1, proc.stderr
    assert ("prefill_cache_hit.verdict_metrics: the file's ['hit_fraction'], the suite's None "
            "(narrows what decides)") in proc.stderr
    assert "kl.verdict_metrics: the file's ['k3'], the suite's None (narrows what decides)" in proc.stderr
    # the same, with the row's changed figures removed: a bare pass beside a change
    del narrowed["changed_not_deciding"]
    proc = check(out, doctored, "bare")
    assert proc.returncode == 2, proc.stderr
    assert ("det / prefill_cache_hit: stored same (changed, not deciding: none), its samples give same "
            "(changed, not deciding: k3, first_divergent)") in proc.stderr


def test_report_check_names_floor_and_alpha_narrowed_in_the_file(tmp_path):
    """Seen: `floor_rel` 0.5 and `alpha` 1e-6 (both in range) stored in the file were trusted: a
    noisy row they turn *unknown* passed."""
    repo, base, cand = planted(tmp_path, "cache")
    suite = refserver_suite(tmp_path / "s.toml", ["prefill_cache_hit"], TRACK, deterministic=False, prompts=8,
                            prompt_len=(40, 90), output_len=8)
    code, result, _ = run_pair(repo, base, cand, suite, tmp_path / "out")
    assert code == 1 and result["comparisons"][0]["verdict"] == "different"
    params_of(result)["prefill_cache_hit"].update(floor_rel=0.5, alpha=1e-6)
    result["comparisons"] = rejudged(tmp_path / "out", result)
    assert result["comparisons"][0]["verdict"] == "unknown"
    proc = check(tmp_path / "out", result, "narrowed")
    assert proc.returncode == 1, proc.stderr
    assert "prefill_cache_hit.alpha: the file's 1e-06, the suite's 0.05 (narrows what decides)" in proc.stderr
    assert "prefill_cache_hit.floor_rel: the file's 0.5, the suite's 0.0 (narrows what decides)" in proc.stderr


def killed_run(tmp_path: Path, sig: signal.Signals) -> Path:
    """`detcheck run` of four configurations (kl; the planted `rename`: nothing served changes,
    every row reads same) killed by `sig` once its first pair is recorded: its --out."""
    repo, base, cand = planted(tmp_path, "rename")
    suite = tmp_path / "four.toml"
    configs = "".join(f'[[config]]\nname = "c{i}"\ndeterministic = true\nprobes = ["kl"]\n' for i in range(4))
    suite.write_text(f'name = "four"\n[models]\nrefserver = "{ROOT / "fixtures/refmodels/hybrid"}"\n'
                     f'[workload]\nprompts = 2\nprompt_len = [12, 16]\noutput_len = 4\n{configs}')
    out = tmp_path / "out"
    proc = subprocess.Popen(detcheck_argv("run", "--repo", str(repo.path), "--base", base, "--candidate", cand,
                                          "--suite", str(suite), "--out", str(out), "--no-progress", "--slots", "1"),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        rows = 0
        deadline = time.monotonic() + 600
        while rows == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                rows = len(json.loads((out / "results.json").read_text())["comparisons"])
            except (OSError, ValueError, KeyError):
                rows = 0  # not written yet, or being replaced
        assert proc.poll() is None and rows >= 1, "the run ended before a pair was recorded"
        os.kill(proc.pid, sig)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    result = json.loads((out / "results.json").read_text())
    assert 1 <= len(result["comparisons"]) < 4 and {c["verdict"] for c in result["comparisons"]} == {"same"}
    return out


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_run_killed_part_way_is_never_a_pass(tmp_path, sig):
    """Seen: a run killed by SIGKILL or SIGTERM (what a CI job at its time limit uploads) left a
    results.json whose missing pairs were simply absent: `report --check` read *same*, exit 0."""
    out = killed_run(tmp_path, sig)
    checked = detcheck("report", str(out), "--check")
    assert checked.returncode == 1, checked.stderr
    assert "not a pass: the run did not finish: its last step never marked the record complete" in checked.stderr
    from harness.completeness import gaps
    from harness.result_files import read_run
    missing = gaps(read_run(out))
    assert "c3 / kl: no base cell, no candidate cell, no comparison row" in missing


def test_a_killed_runs_report_says_it_is_no_pass_where_a_reader_looks_first(tmp_path):
    """Seen: a killed run's report.md and console table read *same* (only stderr and the exit
    code said otherwise), and a JUnit file of it was all green. Now the headline says no pass and
    lists what is missing, the pairs never measured are rows that read missing, and the JUnit
    file fails a `record`/`complete` case."""
    out = killed_run(tmp_path, signal.SIGTERM)
    md = detcheck("report", str(out), "--format", "md")
    assert md.returncode == 0, md.stderr  # a report without --check renders, and exits 0
    verdict = md.stdout.splitlines()[2]
    assert verdict.startswith("**Verdict: not a pass: the record is incomplete ("), verdict
    above_table = md.stdout.split("| configuration |")[0]
    assert "- the run did not finish: its last step never marked the record complete" in above_table
    assert "- c3 / kl: no base cell, no candidate cell, no comparison row" in above_table
    assert ("| c3 | `kl` | – | – | ⛔ missing | not judged by this run: no base cell, no candidate cell, "
            "no comparison row |") in md.stdout
    assert (out / "report.md").read_text() == md.stdout
    console = detcheck("report", str(out))
    assert "verdict: not a pass: the record is incomplete" in console.stdout
    assert "not a pass: c3 / kl: no base cell, no candidate cell, no comparison row" in console.stdout
    assert console.stdout.count(" missing ") >= 1
    printed = json.loads(detcheck("report", str(out), "--format", "json").stdout)
    assert printed["verdict"] == "same" and "c3 / kl: no base cell, no candidate cell, no comparison row" in printed["gaps"]
    checked = detcheck("report", str(out), "--check", "--junit-xml", str(tmp_path / "junit.xml"))
    assert checked.returncode == 1, checked.stderr
    from xml.etree import ElementTree
    suite = ElementTree.fromstring((tmp_path / "junit.xml").read_bytes())
    record = next(case for case in suite.findall("testcase") if case.get("classname") == "record")
    failure = record.find("failure")
    assert failure is not None and failure.get("message", "").startswith("not a pass: the record is incomplete")
    assert "c3 / kl: no base cell, no candidate cell, no comparison row" in (failure.text or "")
    assert int(suite.get("failures")) >= 2  # the record, and at least the last pair: missing


def rendered(out: Path, result: dict, name: str, *extra: str) -> str:
    """report.md of `result` written into a copy of the run's folder, by `report` (`extra`: its options)."""
    where = out.parent / f"rendered-{name}"  # beside `check`'s folders, never one of them
    where.mkdir()
    (where / "results.json").write_text(json.dumps(result))
    detcheck("report", str(where), "--format", "md", *extra)
    return (where / "report.md").read_text()


def test_every_record_that_is_no_pass_says_so_in_its_report(cache_run):
    """Seen: a row-dropped file, a plan-less (schema 3) record, a cell of another run (a stale
    Slurm merge) and a check with narrowed parameters each rendered a report that read as a
    pass: its headline the recorded verdict, the pair it lacks simply absent."""
    out, result = cache_run
    complete = rendered(out, result, "complete")
    assert complete.splitlines()[2].startswith("**Verdict: different (1 different, 1 same)"), complete.splitlines()[2]
    assert "not a pass" not in complete and "missing" not in complete
    dropped = json.loads(json.dumps(result))
    del dropped["comparisons"][0]
    text = rendered(out, dropped, "row-dropped")
    assert text.splitlines()[2].startswith("**Verdict: not a pass: the record is incomplete (1 gap, listed below)")
    assert "| det | `kl` | measured | measured | ⛔ missing | not judged by this run: no comparison row |" in text
    planless = json.loads(json.dumps(result))
    del planless["plan"]
    text = rendered(out, planless, "plan-less")
    assert text.splitlines()[2].startswith("**Verdict: not a pass: the record is incomplete (1 gap, listed below)")
    assert "- the file records no plan" in text.split("| configuration |")[0]
    stale = json.loads(json.dumps(result))
    kl_candidate = next(c for c in stale["cells"] if c["probe"] == "kl" and c["role"] == "candidate")
    kl_candidate["revision"] = stale["base"]  # the candidate's cell measured at the base: another run's
    text = rendered(out, stale, "stale")
    base_short = stale["base"]["sha"][:12]
    assert text.splitlines()[2].startswith("**Verdict: not a pass: the record is incomplete"), text.splitlines()[2]
    row = next(line for line in text.splitlines() if line.startswith("| det | `kl` |"))
    assert f"| ⛔ missing | not judged by this run: its candidate cell measured {base_short}, not the run's " \
           f"candidate {stale['candidate']['sha'][:12]}; as recorded: same: " in row, row
    narrowed = json.loads(json.dumps(result))
    params_of(narrowed)["kl"]["verdict_metrics"] = ["k3"]
    narrowed["comparisons"] = rejudged(out, narrowed)
    text = rendered(out, narrowed, "narrowed", "--check")
    assert text.splitlines()[2].startswith("**Verdict: not a pass: it is not judged as its suite judges (1 gap, "
                                           "listed below)"), text.splitlines()[2]
    assert "- kl.verdict\\_metrics: the file's \\['k3'\\], the suite's None (narrows what decides)" in text  # escaped


def test_baseline_check_that_checked_nothing_is_no_pass(tmp_path):
    """Seen: `baseline check` exited 0 with "0 checks" when the candidate errored, never launched,
    or ran another suite."""
    repo, base, cand = planted(tmp_path, "unbuildable")
    suite = refserver_suite(tmp_path / "s.toml", ["kl"])
    run_pair(repo, base, base, suite, tmp_path / "clean")
    populated = detcheck("baseline", "populate", "--results", str(tmp_path / "clean"), "--out", str(tmp_path / "b.json"))
    assert populated.returncode == 0, populated.stderr
    clean = detcheck("baseline", "check", "--results", str(tmp_path / "clean"), "--baseline", str(tmp_path / "b.json"))
    assert clean.returncode == 0 and "checks, " in clean.stdout and " 0 fail" in clean.stdout, clean.stdout
    # the candidate cannot even be imported: its cell is no measurement
    run_pair(repo, base, cand, suite, tmp_path / "broken")
    broken = detcheck("baseline", "check", "--results", str(tmp_path / "broken"), "--baseline", str(tmp_path / "b.json"))
    assert broken.returncode == 1, broken.stdout
    assert "0 checks" in broken.stdout and "not a pass: no candidate cell was checked against a bound" in broken.stdout
    assert "det/kl: the candidate's cell is" in broken.stdout
    # a run of another suite (its configuration named otherwise): nothing matches the baselines
    other = refserver_suite(tmp_path / "other.toml", ["kl"], config="other")
    run_pair(repo, base, base, other, tmp_path / "other")
    elsewhere = detcheck("baseline", "check", "--results", str(tmp_path / "other"), "--baseline", str(tmp_path / "b.json"))
    assert elsewhere.returncode == 1, elsewhere.stdout
    assert "0 checks" in elsewhere.stdout and "no baseline for other/kl" in elsewhere.stdout


def test_two_suites_of_one_stem_in_a_matrix_entry_never_share_a_folder(tmp_path):
    """Seen: two suites of a matrix entry with the same file stem wrote one folder: a *different*
    run was overwritten by a *same* one, and `report --check` of what was left exited 0."""
    repo, base, cand = planted(tmp_path, "cache")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    refserver_suite(tmp_path / "a" / "kl.toml", ["prefill_cache_hit"], TRACK, prompt_len=(40, 90), output_len=8)
    refserver_suite(tmp_path / "b" / "kl.toml", ["kl"], config="plain")
    (tmp_path / "matrix.toml").write_text('[[entry]]\nname = "pair"\ngpus = 0\ntarget = "refserver"\n'
                                          'suites = ["a/kl.toml", "b/kl.toml"]\n')
    proc = detcheck("matrix", "run", "pair", "--matrix", str(tmp_path / "matrix.toml"), "--repo", str(repo.path),
                    "--base", base, "--candidate", cand, "--out", str(tmp_path / "out"), "--no-progress",
                    "--format", "md", timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    folders = sorted(p.parent for p in (tmp_path / "out").glob("*/results.json"))
    assert len(folders) == 2 and all(f.name.startswith("kl-") for f in folders), folders
    runs = {json.loads((f / "results.json").read_text())["metadata"]["suite_path"]: f for f in folders}
    assert set(runs) == {str(tmp_path / "a" / "kl.toml"), str(tmp_path / "b" / "kl.toml")}
    assert detcheck("report", str(runs[str(tmp_path / "a" / "kl.toml")]), "--check").returncode == 1
    assert detcheck("report", str(runs[str(tmp_path / "b" / "kl.toml")]), "--check").returncode == 0


FAKE_SBATCH = '''#!{python}
"""sbatch for the test: runs the job's --wrap script here (as a one-node cluster would), or,
with FAKE_SBATCH_FAIL set, fails it at once (a node that dies before the job starts)."""
import os, subprocess, sys
args = sys.argv[1:]
def value(flag):
    return args[args.index(flag) + 1]
print("4242", flush=True)
log = value("--output")
with open(log, "w") as f:
    if os.environ.get("FAKE_SBATCH_FAIL"):
        f.write("slurmstepd: error: node failure\\n")
        sys.exit(1)
    sys.exit(subprocess.run(["bash", "-c", value("--wrap")], cwd=value("--chdir"), stdout=f, stderr=f).returncode)
'''


def test_matrix_run_slurm_force_never_merges_an_earlier_runs_job_results(tmp_path):
    """Seen: `matrix run --slurm --force` merged an earlier run's job results when every new job
    failed: the candidate cell was HEAD~1's while the header named HEAD; *same*, exit 0. Slurm is
    stood in for by an `sbatch` that runs each job's script here (the jobs, servers and merge are
    detcheck's own), then by one whose every job fails."""
    repo, base, cand = planted(tmp_path, "cache")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH.format(python=sys.executable))
    for tool in ("srun", "scancel"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    refserver_suite(tmp_path / "cache.toml", ["prefill_cache_hit"], TRACK, prompt_len=(40, 90), output_len=8)
    (tmp_path / "matrix.toml").write_text('[[entry]]\nname = "pair"\ngpus = 0\ntarget = "refserver"\n'
                                          'suites = ["cache.toml"]\n')
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def entry(candidate: str, *extra: str, fail: bool = False) -> subprocess.CompletedProcess:
        return detcheck("matrix", "run", "pair", "--matrix", str(tmp_path / "matrix.toml"), "--repo", str(repo.path),
                        "--base", base, "--candidate", candidate, "--out", str(tmp_path / "out"), "--slurm",
                        "--no-progress", "--format", "md", *extra, timeout=900,
                        env={**env, **({"FAKE_SBATCH_FAIL": "1"} if fail else {})})

    first = entry(base)  # the base against itself: same
    assert first.returncode == 0, first.stderr[-3000:]
    again = entry(cand, "--force", fail=True)  # HEAD, the planted regression, every job failing
    assert again.returncode == 1, again.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "cache" / "results.json").read_text())
    assert result["candidate"]["sha"] == cand
    assert not [c for c in result["cells"] if c["revision"]["sha"] != (cand if c["role"] == "candidate" else base)]
    assert "slurm: not merged: detcheck-cache-det-candidate: its results are another run's" in again.stderr
    checked = detcheck("report", str(tmp_path / "out" / "cache"), "--check")
    assert checked.returncode == 1, checked.stderr
    assert "det / prefill_cache_hit: no base cell, no candidate cell" in checked.stderr
