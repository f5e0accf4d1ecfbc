"""Per-revision environments end to end: `detcheck run` over a reference-server repo whose
revisions pin detcheck_envprobe at different versions, built offline from local wheels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, detcheck, refserver_suite
from envprobe import write_envprobe_wheel
from harness.envs import DEFAULT_ENV_FILE, MANIFEST
from harness.fixture_repo import FixtureRepo


def pin(repo: FixtureRepo, version: str) -> str:
    """A commit whose env file pins detcheck_envprobe at `version`."""
    (repo.path / DEFAULT_ENV_FILE).write_text(f"detcheck_envprobe=={version}\n")
    return repo.commit(f"detcheck_envprobe {version}")


def offline_wheels(tmp_path: Path) -> list[str]:
    """Both versions' wheels in one folder, and the pip options that build from it alone."""
    wheels = tmp_path / "wheels"
    for version in ("1.0", "2.0"):
        write_envprobe_wheel(wheels, version)
    return ["--env-pip-arg=--no-index", f"--env-pip-arg=--find-links={wheels}"]


def run(tmp_path: Path, repo: FixtureRepo, base: str, candidate: str, name: str) -> tuple[int, dict, str]:
    proc = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", candidate,
                    "--suite", str(refserver_suite(tmp_path / "envs.toml", ["kl"])), "--out", str(tmp_path / name),
                    *offline_wheels(tmp_path), "--no-progress")
    result = json.loads((tmp_path / name / "results.json").read_text())
    return proc.returncode, result, proc.stderr


def server_logs(out: Path, role: str) -> str:
    return "".join(p.read_text() for p in (out / "logs").glob(f"*-{role}-*.log"))


@pytest.mark.slow
def test_each_revision_runs_from_its_own_environment_and_a_rerun_reuses_it(tmp_path, isolated_cache):
    repo = FixtureRepo.create(tmp_path / "repo")
    base, candidate = pin(repo, "1.0"), pin(repo, "2.0")
    code, result, stderr = run(tmp_path, repo, base, candidate, "first")
    assert code == 0, stderr[-3000:]
    envs = result["metadata"]["environments"]
    assert envs["base"]["packages"] == {"detcheck_envprobe": "1.0"}
    assert envs["candidate"]["packages"] == {"detcheck_envprobe": "2.0"}
    assert (envs["base"]["key"]["sha"], envs["candidate"]["key"]["sha"]) == (base, candidate)
    assert envs["base"]["file"] == DEFAULT_ENV_FILE and Path(envs["base"]["path"]).parent == isolated_cache / "envs"
    # Each server imported its own environment's version, and its cells say where they ran.
    assert "detcheck_envprobe 1.0" in server_logs(tmp_path / "first", "base")
    assert "detcheck_envprobe 2.0" in server_logs(tmp_path / "first", "candidate")
    for cell in result["cells"]:
        assert cell["metadata"]["python"] == envs[cell["role"]]["python"]
        assert cell["metadata"]["environment"] == envs[cell["role"]]
    assert len({cell["key"]["interpreter"] for cell in result["cells"]}) == 2
    built = {role: (Path(env["path"]).resolve().stat().st_ino, (Path(env["path"]) / MANIFEST).read_text())
             for role, env in envs.items()}

    code, again, stderr = run(tmp_path, repo, base, candidate, "again")
    assert code == 0, stderr[-3000:]
    assert again["metadata"]["environments"] == envs
    assert {role: (Path(env["path"]).resolve().stat().st_ino, (Path(env["path"]) / MANIFEST).read_text())
            for role, env in envs.items()} == built  # the same directories, never rebuilt
    assert again["launches"] == []  # same environments, same keys: every cell from the store


@pytest.mark.slow
def test_an_environment_that_cannot_be_built_fails_only_its_revision(tmp_path, isolated_cache):
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()  # no env file: runs on the running interpreter
    broken = pin(repo, "9.9")
    code, result, stderr = run(tmp_path, repo, base, broken, "out")
    assert code == 1, stderr[-3000:]
    by_role = {c["role"]: c for c in result["cells"]}
    assert by_role["base"]["status"] == "ok" and "environment" not in by_role["base"]["metadata"]
    assert by_role["candidate"]["status"] == "error"
    assert "No matching distribution found for detcheck_envprobe==9.9" in by_role["candidate"]["reason"]
    assert result["comparisons"][0]["verdict"] == "error"
    assert "error" in result["metadata"]["environments"]["candidate"]
    assert [p for p in (isolated_cache / "envs").iterdir() if p.is_dir() or p.is_symlink()] == []
    assert [launch["role"] for launch in result["launches"]] == ["base"]


@pytest.mark.slow
def test_bisect_builds_every_commits_environment_with_the_given_pip_options(tmp_path, isolated_cache):
    """Offline, only the local wheels can satisfy the env file: a bisect that dropped the pip
    options would fail every environment (the good endpoint first) and find nothing."""
    repo = FixtureRepo.create(tmp_path / "repo")
    good = pin(repo, "1.0")
    repo.note("a harmless commit")
    repo.edit("cache")
    culprit = repo.commit("planted regression: cache")
    bad = repo.note("another harmless commit")
    proc = detcheck("bisect", "--repo", str(repo.path), "--good", good, "--bad", bad,
                    "--suite", str(ROOT / "suites" / "default.toml"), "--config", "deterministic",
                    "--probe", "prefill_cache_hit", *offline_wheels(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"first bad commit: {culprit[:12]}" in proc.stdout
    (session,) = (isolated_cache / "bisect").iterdir()
    runs = sorted((session / "runs").glob("*/results.json"))
    assert runs
    for path in runs:
        envs = json.loads(path.read_text())["metadata"]["environments"]
        assert {role: env["packages"] for role, env in envs.items()} == {
            "base": {"detcheck_envprobe": "1.0"}, "candidate": {"detcheck_envprobe": "1.0"}}


@pytest.mark.slow
def test_matrix_run_builds_each_revisions_environment_with_the_given_pip_options(tmp_path, isolated_cache):
    repo = FixtureRepo.create(tmp_path / "repo")
    base, candidate = pin(repo, "1.0"), pin(repo, "2.0")
    suite = refserver_suite(tmp_path / "envs.toml", ["kl"])
    (tmp_path / "matrix.toml").write_text(f'[[entry]]\nname = "cpu"\ntarget = "refserver"\nsuites = ["{suite}"]\n')
    proc = detcheck("matrix", "run", "cpu", "--matrix", str(tmp_path / "matrix.toml"), "--repo", str(repo.path),
                    "--base", base, "--candidate", candidate, "--out", str(tmp_path / "out"), "--no-progress",
                    *offline_wheels(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    envs = json.loads((tmp_path / "out" / "envs" / "results.json").read_text())["metadata"]["environments"]
    assert {role: env["packages"] for role, env in envs.items()} == {
        "base": {"detcheck_envprobe": "1.0"}, "candidate": {"detcheck_envprobe": "2.0"}}
