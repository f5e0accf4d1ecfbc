"""`detcheck selftest` end to end: a reference-server repository (real git, real servers, real
HTTP) whose revision registers three fixes for SGLANG_DEBUG_REVERT_PR. A suite of decode-vs-replay
KL and prefix-cache hits catches the cache and decode reverts and misses the draft's (accept
length only): 2 of 3, exit 1; the cache revert alone, exit 0; an unregistered fix, exit 2."""

from __future__ import annotations

import json

import pytest

from conftest import detcheck, refserver_suite
from harness.fixture_repo import FixtureRepo

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return FixtureRepo.create(tmp_path_factory.mktemp("selftest") / "repo")


def selftest(repo: FixtureRepo, tmp_path, *extra: str):
    return selftest_of(repo, tmp_path, ["kl", "prefill_cache_hit"], *extra)


def selftest_of(repo: FixtureRepo, tmp_path, probes: list[str], *extra: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    suite = refserver_suite(tmp_path / "s.toml", probes, "mamba_track_interval = 16\n",
                            prompts=2, prompt_len=(40, 90), output_len=8)
    out = tmp_path / "out"
    proc = detcheck("selftest", "--repo", str(repo.path), "--rev", repo.head(), "--suite", str(suite),
                    "--out", str(out), "--no-progress", *extra, timeout=900)
    return proc, out


def test_each_registered_fix_is_reverted_and_the_misses_are_the_false_same_rate(repo, tmp_path):
    proc, out = selftest(repo, tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = json.loads((out / "selftest.json").read_text())
    assert result["control"]["verdict"] == "same", result["control"]
    by_fix = {f["fix"]: f for f in result["fixes"]}
    assert sorted(by_fix) == [9001, 9002, 9003]
    assert by_fix[9001]["caught"] and by_fix[9001]["different"] == ["det/prefill_cache_hit"], by_fix[9001]
    assert by_fix[9002]["caught"] and "det/kl" in by_fix[9002]["different"], by_fix[9002]
    assert not by_fix[9003]["caught"] and by_fix[9003]["verdict"] == "same", by_fix[9003]
    assert result["caught"] == 2 and result["false_same_rate"] == pytest.approx(1 / 3)
    assert "Caught 2 of 3 applied fixes (3 registered, 0 not applied)" in proc.stdout and "**missed**" in proc.stdout
    # the reverted side's servers got the toggle, the base's did not; each run has its report
    cells = json.loads((out / "revert-9001" / "results.json").read_text())["cells"]
    envs = {c["role"]: c["metadata"]["server_env"] for c in cells}
    assert envs["candidate"].get("SGLANG_DEBUG_REVERT_PR") == "9001" and "SGLANG_DEBUG_REVERT_PR" not in envs["base"]
    assert (out / "revert-9002" / "report.md").is_file() and (out / "selftest.md").is_file()


def test_one_fix_caught_exits_zero_and_an_unregistered_one_is_bad_input(repo, tmp_path):
    proc, out = selftest(repo, tmp_path / "one", "--fix", "9001")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [f["fix"] for f in json.loads((out / "selftest.json").read_text())["fixes"]] == [9001]
    bad, _ = selftest(repo, tmp_path / "bad", "--fix", "4242")
    assert bad.returncode == 2 and "--fix 4242: not registered" in bad.stderr and "9001, 9002, 9003" in bad.stderr


def test_a_fix_commit_the_registry_lacks_is_reverted_by_git_and_one_that_conflicts_is_skipped(tmp_path):
    """A repository whose history plants `mlp-scale`, fixes it in a commit of its own, and rewrites
    a notes file twice: `--revert FIX` makes the revision-with-the-fix-reverted the candidate
    (revision_kl catches it); `--revert` of the notes' first commit conflicts and is skipped with
    git's reason; a name that is no commit is exit 2."""
    repo = FixtureRepo.create(tmp_path / "repo")
    model = repo.path / "python" / "refserver" / "model.py"
    fixed = model.read_text()
    repo.edit("mlp-scale")
    repo.commit("layer 1's MLP scaled by mistake")
    model.write_text(fixed)
    fix = repo.commit("fix: layer 1's MLP output unscaled")
    (repo.path / "NOTES").write_text("first\n")
    first_note = repo.commit("notes")
    (repo.path / "NOTES").write_text("second\n")
    repo.commit("notes rewritten")
    proc, out = selftest_of(repo, tmp_path, ["revision_kl"], "--revert", fix, "--revert", first_note)
    assert proc.returncode == 1, proc.stderr[-3000:]  # the skipped one is not caught
    result = json.loads((out / "selftest.json").read_text())
    assert result["control"]["verdict"] == "same", result["control"]
    runs = {f["reverted"]: f for f in result["fixes"]}
    assert runs[fix]["caught"] and runs[fix]["different"] == ["det/revision_kl"], runs[fix]
    assert runs[first_note]["not_applied"] == (f"git revert does not apply cleanly at {repo.head()[:12]}: "
                                               "conflicts in NOTES"), runs[first_note]
    assert (result["registered"], result["named_commits"], result["applied"]) == (0, 2, 1)
    assert "Caught 1 of 1 applied fixes (0 registered and 2 named commits, 1 not applied)" in proc.stdout
    assert f"`git revert {first_note[:12]}`" in proc.stdout and "skipped: `git revert does not apply" in proc.stdout
    revert_run = json.loads((out / f"revert-{fix[:12]}" / "results.json").read_text())
    assert revert_run["base"]["sha"] == repo.head() and revert_run["candidate"]["sha"] != repo.head()
    assert not (repo.path / ".git" / "REVERT_HEAD").exists()  # the user's checkout was never touched
    bad, _ = selftest_of(repo, tmp_path / "bad", ["revision_kl"], "--revert", "no-such-commit")
    assert bad.returncode == 2 and "--revert no-such-commit: no such commit" in bad.stderr, bad.stderr[-2000:]
