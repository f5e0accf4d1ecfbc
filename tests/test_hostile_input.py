"""Hostile input, round 3: per-revision environments, result files, secrets, slots, multi-GPU
entries, bisect sessions, the leftover-server registry and the messages. Each test is one
defect class reproduced; the slow ones start real processes."""

from __future__ import annotations

import errno
import gzip
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import git, refserver_suite
from harness.capabilities import revision_capabilities
from harness.errors import LaunchError, UsageError
from harness.suite import load_suite
from harness.targets import get_target

# -- 8. messages -------------------------------------------------------------------------


def test_a_full_disk_names_the_file_whose_write_failed(tmp_path, monkeypatch, capsys):
    """ENOSPC as a real write reports it: from the write or the fsync, with no file name."""
    from harness import cli, result_files

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(result_files.os, "fsync", full)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text((Path(__file__).parent / "data" / "demo-cache.json").read_text())
    code = cli.main(["baseline", "populate", "--results", str(run_dir), "--out", str(tmp_path / "b.json")])
    err = capsys.readouterr().err
    assert code == 4 and "No space left on device" in err and str(tmp_path / "b.json") in err, err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".b.json")]  # no temp file left


def test_a_help_that_hangs_says_it_timed_out_not_an_exit_code(tmp_path):
    hangs = tmp_path / "python"
    hangs.write_text("#!/bin/sh\nexec sleep 60\n")
    hangs.chmod(0o755)
    with pytest.raises(LaunchError) as caught:
        revision_capabilities(get_target("refserver", str(hangs)), None, None, timeout_s=1)
    assert "timed out after 1 s" in str(caught.value) and "exit code" not in str(caught.value)
    assert caught.value.exit_code is None


def test_a_nested_table_as_a_suite_env_value_is_bad_input(tmp_path):
    suite = refserver_suite(tmp_path / "s.toml", ["kl"])
    suite.write_text(suite.read_text().replace("[workload]", "[server.env]\nNESTED = { a = 1 }\n[workload]", 1))
    with pytest.raises(UsageError, match=r"\[server\]\.env\.NESTED: must be a string or a number, not a table"):
        load_suite(suite)
    suite.write_text(suite.read_text().replace("NESTED = { a = 1 }", 'PLAIN = "1"'))
    assert load_suite(suite).server_env == {"PLAIN": "1"}


# -- 4. slots ----------------------------------------------------------------------------

HUGE = "99999999999999999999"


def test_a_slot_count_beyond_any_host_is_bad_input(tmp_path):
    """Before: --slots 10**20 laid out 10**20 slots (the process grew by ~25 MB/s, forever)."""
    from harness.bisect import BisectSpec, bisect
    from harness.cli import build_parser
    from harness.commands.common_args import slot_count

    def count(slots: str) -> int:
        return slot_count(build_parser().parse_args(["run", "--suite", "s.toml", "--slots", slots]), "refserver")

    with pytest.raises(UsageError, match=f"--slots {HUGE}: must be between 1 and 256"):
        count(HUGE)
    assert count("256") == 256
    with pytest.raises(UsageError, match="--slots 0: must be between 1 and 256"):
        count("0")
    spec = BisectSpec(repo=tmp_path, good="0" * 40, suite=tmp_path / "s.toml", probes=("kl",))
    with pytest.raises(UsageError, match=f"--slots {HUGE}: must be between 1 and 256"):
        bisect(spec, "HEAD", slots=int(HUGE))


@pytest.mark.parametrize("field", [f"servers_per_gpu = {HUGE}", f"gpus = {HUGE}"])
def test_a_matrix_entry_with_more_gpus_or_servers_than_a_host_is_bad_input(tmp_path, field):
    from harness.matrix import load_matrix

    suite = refserver_suite(tmp_path / "s.toml", ["kl"])
    gpus = "" if field.startswith("gpus") else "gpus = 1\n"
    (tmp_path / "m.toml").write_text(f'[[entry]]\nname = "x"\ngpu = "H200"\n{gpus}{field}\nsuites = ["{suite}"]\n')
    with pytest.raises(UsageError, match=r"'x'\.(gpus|servers_per_gpu): must be an integer from [01] to 64"):
        load_matrix(tmp_path / "m.toml")


# -- 5. multi-GPU entries ----------------------------------------------------------------


def test_an_entry_never_hands_out_fewer_gpus_than_it_needs():
    """Before: a 2-GPU entry with CUDA_VISIBLE_DEVICES=0 gave both roles CUDA_VISIBLE_DEVICES=''."""
    from harness.matrix import MatrixEntry
    from harness.pipeline.slots import entry_slots

    two = MatrixEntry(name="two", gpu="H200", gpus=2, suites=())
    for visible in ("0", ""):
        with pytest.raises(UsageError, match="'two' needs 2 GPUs; CUDA_VISIBLE_DEVICES="):
            entry_slots(two, visible)
    assert [s.env for s in entry_slots(two, "3,5")] == [{"CUDA_VISIBLE_DEVICES": "3"}, {"CUDA_VISIBLE_DEVICES": "5"}]


@pytest.mark.slow
@pytest.mark.parametrize("gpus_here, visible, why", [
    (["NVIDIA H200", "NVIDIA H200"], "0", "needs 2× H200; this machine has 1 (GPUs: NVIDIA H200)"),
    ([], None, "needs 2× H200; this machine has 0 (GPUs: none)"),
])
def test_matrix_run_skips_an_entry_whose_gpus_are_not_there(tmp_path, gpus_here, visible, why):
    from conftest import detcheck, fake_gpus
    from harness.fixture_repo import FixtureRepo

    suite = refserver_suite(tmp_path / "s.toml", ["kl"])
    (tmp_path / "m.toml").write_text(
        f'[[entry]]\nname = "h200x2"\ngpu = "H200"\ngpus = 2\ntarget = "sglang"\nsuites = ["{suite}"]\n')
    repo = FixtureRepo.create(tmp_path / "repo")
    proc = detcheck("matrix", "run", "h200x2", "--matrix", str(tmp_path / "m.toml"), "--repo", str(repo.path),
                    "--base", repo.head(), "--candidate", repo.head(), "--out", str(tmp_path / "out"),
                    "--no-progress", env=fake_gpus(tmp_path / "bin", gpus_here, visible))
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert f"matrix h200x2: skipped: {why}" in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing launched, nothing written


# -- 2. result files ---------------------------------------------------------------------

DEMO_RUN = Path(__file__).parent / "data" / "demo-cache.json"


def gzipped_run(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json.gz").write_bytes(gzip.compress(text.encode()))
    return folder


def test_an_out_holding_a_gzipped_run_is_an_earlier_run(tmp_path):
    from harness.commands.common_args import claim_out_dir

    out = gzipped_run(tmp_path / "out", DEMO_RUN.read_text())
    (out / "report.md").write_text("the earlier report")
    with pytest.raises(UsageError, match="holds an earlier run; pass --resume"):
        claim_out_dir(out, force=False)
    assert (out / "report.md").read_text() == "the earlier report"
    claim_out_dir(out, force=True)
    assert not (out / "results.json.gz").exists() and not (out / "report.md").exists()


def test_a_folder_holding_both_result_files_that_disagree_is_not_read(tmp_path, capsys):
    from harness import cli

    text = DEMO_RUN.read_text()
    out = gzipped_run(tmp_path / "run", text)
    (out / "results.json").write_text(text)
    assert cli.main(["report", str(out), "--format", "json"]) == 0  # the same run twice: read
    capsys.readouterr()
    data = json.loads(text)
    for comp in data["comparisons"]:
        comp["verdict"] = "same"
    (out / "results.json").write_text(json.dumps(data))
    assert cli.main(["report", str(out), "--check", "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert "holds both results.json and results.json.gz, and they differ" in err and str(out) in err


@pytest.mark.parametrize("name", ["results.json.gz", "results.json"])
def test_a_result_file_past_the_cap_is_refused_before_it_is_read_whole(tmp_path, monkeypatch, name):
    """A gzip bomb, and a plain results.json of gigabytes (`--order-from`, `report`): the
    reader holds the cap at most."""
    from harness import bounded, result_files
    from harness.errors import CorruptResult

    monkeypatch.setattr(bounded, "RESULT_DOCUMENT", bounded.SizeCap(2**20, "a result file"))
    big = tmp_path / "run" / name
    big.parent.mkdir()
    with (gzip.open if name.endswith(".gz") else open)(big, "wb") as f:
        for _ in range(4):
            f.write(b" " * 2**20)  # 4 MiB of whitespace: valid JSON padding around nothing
    reads: list[int] = []
    real_read = bounded.read_bounded
    monkeypatch.setattr(bounded, "read_bounded", lambda read, cap, where="": real_read(
        lambda n: reads.append(n) or read(n), cap, where))
    with pytest.raises(CorruptResult, match=rf"{big}: larger than 1 MiB, the most detcheck reads of a result "
                                            rf"file; not a results file detcheck wrote"):
        result_files.read_run(big.parent)
    assert sum(reads) <= 2**20 + 1  # never more asked for than one byte past the cap


# -- demo: what it would destroy ---------------------------------------------------------


def test_demo_refuses_an_out_holding_an_earlier_run_without_force(tmp_path):
    from conftest import detcheck

    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(DEMO_RUN.read_text())
    proc = detcheck("demo", "--out", str(out), "--no-progress", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"--out {out} holds an earlier run; pass --force to replace it" in proc.stderr
    assert (out / "results.json").read_text() == DEMO_RUN.read_text()


@pytest.mark.parametrize("occupied", ["refserver-cache", "refserver-bisect"])
@pytest.mark.parametrize("as_link", [False, True])
def test_demo_keep_never_removes_what_an_occupied_repo_place_holds(tmp_path, occupied, as_link):
    """An earlier kept demo's repositories (the user's commits in them), or a link there to
    anything: refused before anything is made, never removed nor followed."""
    from conftest import detcheck

    kept, mine = tmp_path / "kept", tmp_path / "mine"
    kept.mkdir()
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    if as_link:
        (kept / occupied).symlink_to(mine)
    else:
        mine.rename(kept / occupied)
    proc = detcheck("demo", "--keep", str(kept), "--no-progress", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    what = "a link" if as_link else "a directory that is not empty"
    assert f"--keep {kept}: {kept / occupied}: is {what}" in proc.stderr, proc.stderr
    assert (kept / occupied / "notes.txt").read_text() == "the user's"
    assert sorted(p.name for p in kept.iterdir()) == [occupied]  # nothing made beside it


@pytest.mark.parametrize("kind", ["file", "link"])
def test_demo_keep_on_a_file_or_a_link_is_bad_input_naming_it(tmp_path, kind):
    from conftest import detcheck

    kept = tmp_path / "kept"
    if kind == "file":
        kept.write_text("not a directory")
    else:
        (tmp_path / "elsewhere").mkdir()
        kept.symlink_to(tmp_path / "elsewhere")
    proc = detcheck("demo", "--keep", str(kept), "--no-progress", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"--keep {kept}: is a {kind}, not a directory" in proc.stderr, proc.stderr
    assert kind == "file" or not any((tmp_path / "elsewhere").iterdir())


def test_force_removes_only_what_detcheck_wrote(tmp_path):
    from harness.commands.common_args import claim_out_dir

    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    (out / "plots").mkdir()
    (out / "results.json").write_text(DEMO_RUN.read_text())
    (out / "report.md").write_text("# run\n\n![swa swa_peak](plots/swa-swa_peak.png)\n")
    written = [out / "logs" / "swa-base-0123456789ab.log", out / "logs" / "swa-candidate-ba9876543210.log",
               out / "plots" / "swa-swa_peak.png", out / "plots" / "swa-swa_peak.svg"]
    mine = [out / "logs" / "my-notes.txt", out / "plots" / "my-figure.png", out / "notes.md"]
    for path in written + mine:
        path.write_text("x")
    claim_out_dir(out, force=True)
    assert [p for p in written if p.exists()] == []
    assert [p for p in mine if not p.exists()] == []
    assert not (out / "results.json").exists() and not (out / "report.md").exists()


# -- 3. secrets --------------------------------------------------------------------------

ECHO_SHIM = """import os, runpy, sys
argv = sys.argv[1:]
print('launch argv:', ' '.join(argv), flush=True)
print('launch env:', ' '.join(f'{k}={v}' for k, v in sorted(os.environ.items())), flush=True)
if '--help' in argv:
    print('  --api-key KEY  --db-passwd PW  --credential C')
    print('  --hub-login LOGIN     The password of the model hub account.')
kept = []
words = iter(argv)
for word in words:
    if word in ('--db-passwd', '--hub-login'):
        next(words)
    elif not word.startswith(('--api-key', '--credential')):
        kept.append(word)
sys.argv = ['sglang.launch_server', *kept]
runpy.run_module('faults', run_name='__main__')
"""


@pytest.mark.slow
def test_secrets_of_every_spelling_are_masked_in_every_file_written(tmp_path, bare_python, isolated_cache):
    """A server that echoes its argv and its whole environment into its log (and --help)."""
    import subprocess

    from conftest import make_sglang_repo
    from faultlib import Bench

    secret = {name: f"{name}-{os.urandom(6).hex()}" for name in
              ("abbrev", "passwd", "credential", "suite_cred", "suite_pass", "url",
               "my_auth", "gh_pat", "db_pwd", "session_cookie", "hub_login",
              "conn_pw", "netrc_pw", "db_cred", "app_session", "gpg_private", "release_signing")}
    secret["by_value"] = f"ghp_{os.urandom(18).hex()}"  # a GitHub token under a name that says nothing
    repo = make_sglang_repo(tmp_path, module="faults")
    (repo / "python" / "sglang" / "launch_server.py").write_text(ECHO_SHIM)
    for message in ("echo argv and env", "candidate"):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit",
                        "-q", "--allow-empty", "-am", message], check=True)
    bench = Bench(tmp_path, bare_python, repo=repo)
    bench.write_suite({"one": ["--fault", "http-500"]},  # a failing cell keeps a log tail too
                      env={"SERVICE_CREDENTIAL": secret["suite_cred"], "PGPASS": secret["suite_pass"],
                           "MY_AUTH": secret["my_auth"], "GH_PAT": secret["gh_pat"], "DB_PWD": secret["db_pwd"],
                           "SESSION_COOKIE": secret["session_cookie"], "BUILD_SETTING": secret["by_value"],
                           # round 5: secrets by the shape of a value, and names by their last word
                           "DB_CONNECTION": f"Server=db;User Id=u;Password={secret['conn_pw']};Encrypt=yes",
                           "HUB_NETRC": f"machine hub.invalid login u password {secret['netrc_pw']}",
                           "DB_CRED": secret["db_cred"], "APP_SESSION": secret["app_session"],
                           "GPG_PRIVATE": secret["gpg_private"], "RELEASE_SIGNING": secret["release_signing"]})
    proc = detcheck_with(bench, {"MIRROR_URL": f"https://mirror-user:{secret['url']}@mirror.invalid/simple"},
                         f"--server-a=--api-key={secret['abbrev']}",  # argparse's abbreviation of --server-arg
                         "--server-arg=--db-passwd", f"--server-arg={secret['passwd']}",
                         f"--server-arg=--credential={secret['credential']}",
                         # a flag secret by its --help only
                         "--server-arg=--hub-login", f"--server-arg={secret['hub_login']}")
    assert proc.returncode == 1, proc.stderr[-2000:]
    logs = "".join(p.read_text() for p in (bench.out / "logs").iterdir())
    assert "launch argv:" in logs and "launch env:" in logs and "mirror.invalid" in logs
    for root in (bench.out, isolated_cache):
        for path in root.rglob("*"):
            if path.is_file():
                text = path.read_bytes().decode("utf-8", "replace")
                assert not [name for name, value in secret.items() if value in text], path
    assert not [name for name, value in secret.items() if value in proc.stdout + proc.stderr]


def detcheck_with(bench, env: dict[str, str], *extra: str):
    from conftest import detcheck

    return detcheck(*bench.args(*extra), env={**bench.env(), **env}, timeout=120)


# -- 7. the leftover-server registry -----------------------------------------------------


def orphan_record(cache: Path, pid: int, **fields) -> Path:
    """A registry record naming `pid`, whose harness is gone (a pid no process has, start 1.0)."""
    import psutil

    record = cache / "servers" / f"999999999-{pid}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"harness_pid": 999999999, "harness_started": 1.0, "server_pid": pid,
                                  "server_started": psutil.Process(pid).create_time(), **fields}))
    return record


@pytest.mark.parametrize("marker, token", [
    (None, None),  # a process detcheck never started, named by a record without a token
    (None, "a-token"),  # … or by a record with one
    ("another-token", "a-token"),  # a server of another record
])
def test_the_registry_kills_only_a_process_carrying_its_records_marker(isolated_cache, marker, token):
    """Before: any process whose pid and start time matched a record was killed (a `sleep`)."""
    import subprocess

    from harness.lifeline import SERVER_MARKER, reap_orphans

    env = {k: v for k, v in os.environ.items() if k != SERVER_MARKER}
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True,
                                env={**env, **({SERVER_MARKER: marker} if marker else {})})
    try:
        record = orphan_record(isolated_cache, stranger.pid, **({"token": token} if token else {}))
        assert reap_orphans() == []
        assert stranger.poll() is None and not record.exists()
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="starting another user's process needs root")
def test_the_registry_never_kills_another_users_process(isolated_cache):
    import subprocess

    from harness.lifeline import SERVER_MARKER, reap_orphans

    other_user = subprocess.Popen(["sleep", "60"], start_new_session=True, user=65534,
                                  env={**os.environ, SERVER_MARKER: "a-token"})
    try:
        orphan_record(isolated_cache, other_user.pid, token="a-token")
        assert reap_orphans() == []
        assert other_user.poll() is None
    finally:
        other_user.kill()
        other_user.wait()


# -- 6. bisect sessions ------------------------------------------------------------------


@pytest.mark.parametrize("file, text", [
    ("session.json", "{not json"),
    ("session.json", '{"repo": "/r"}'),  # fields missing
    ("evaluations.jsonl", '{"phase": "step"}\n'),
])
def test_a_corrupt_bisect_session_is_reported_with_its_path(tmp_path, capsys, file, text):
    from harness import cli
    from harness.bisect import BisectSpec

    session = tmp_path / "session"
    if file != "session.json":  # a good session, in a repository whose HEAD the step judges
        git(tmp_path, "init", "-q")
        git(tmp_path, "commit", "-q", "--allow-empty", "-m", "one")
        BisectSpec(repo=tmp_path, good="0" * 40, suite=tmp_path / "s.toml", probes=("kl",),
                   session_dir=session).save()
    session.mkdir(exist_ok=True)
    (session / file).write_text(text)
    assert cli.main(["bisect-step", "--session", str(session), "--commit", "HEAD"]) == 128
    err = capsys.readouterr().err
    assert f"{session / file}" in err and "corrupt bisect" in err, err


@pytest.mark.slow
def test_a_second_bisect_of_a_repository_is_refused_while_the_first_runs(tmp_path, bare_python, no_leftovers):
    """Before: both used one session folder and worktree and died in raw git errors."""
    import subprocess

    from conftest import detcheck, detcheck_argv
    from faultlib import Bench

    bench = Bench(tmp_path, bare_python)
    # The first bisect sits in its endpoint's launch (a server that never gets healthy) while
    # the second starts: whatever the machine's speed, the two overlap.
    bench.write_suite({"one": ["--fault", "never-healthy"]}, startup_timeout_s=300)
    args = ["bisect", "--repo", str(bench.repo), "--good", "main~1", "--bad", "main", "--suite", str(bench.suite),
            "--probe", "kl", "--target", "sglang", "--python", bench.python]
    first = subprocess.Popen(detcheck_argv(*args), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, **bench.env()})
    try:
        bench.wait_launches("one", 1, timeout_s=120)
        second = detcheck(*args, env=bench.env(), timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"another bisect of {bench.repo} is running" in second.stderr
        assert "fatal:" not in second.stderr and "Traceback" not in second.stderr
        assert first.poll() is None  # the first goes on, undisturbed
    finally:
        first.terminate()
        first.communicate(timeout=60)


# -- 1. per-revision environments --------------------------------------------------------

SHA = "a" * 40


def revision_tree(path: Path, requirements: str) -> Path:
    from harness.envs import DEFAULT_ENV_FILE

    path.mkdir(parents=True)
    (path / DEFAULT_ENV_FILE).write_text(requirements)
    return path


def wheel_folder(path: Path, *versions: str) -> Path:
    from envprobe import write_envprobe_wheel

    for version in versions:
        write_envprobe_wheel(path, version)
    return path


def built_names() -> list[str]:
    from harness.envs import envs_root

    return sorted(p.name for p in envs_root().iterdir() if p.is_dir() or p.is_symlink()) if envs_root().is_dir() else []


@pytest.mark.parametrize("pip_args", [("--target=/tmp/elsewhere",), ("--target", "/tmp/elsewhere"), ("-t", "/x"),
                                      ("-t/x",), ("--prefix=/x",), ("--root", "/x"), ("--user",),
                                      # pip takes an unambiguous prefix of a long option, and clustered flags
                                      ("--prefi=/x",), ("--ta", "/x"), ("--use",), ("-qt/x",), ("-vqt", "/x"),
                                      # uv's: the environment it installs into
                                      ("--python=/other/bin/python",), ("--pyth", "/x"), ("-p", "/x"),
                                      ("--system",)])
def test_pip_options_that_move_the_install_are_refused(pip_args):
    from harness.envs import EnvOptions

    with pytest.raises(UsageError, match="installs outside the environment being built"):
        EnvOptions(pip_args=pip_args)


@pytest.mark.parametrize("pip_args", [("--pre",), ("--no-index", "--find-links=/wheels"), ("-i", "https://x/simple"),
                                      ("-q",), ("--root-user-action=ignore",), ("--python-version", "3.11"),
                                      ("-r/x/more.txt",)])
def test_pip_options_that_install_into_the_environment_are_kept(pip_args):
    from harness.envs import EnvOptions

    assert EnvOptions(pip_args=pip_args).pip_args == pip_args


@pytest.mark.slow
def test_a_build_that_installed_nothing_into_the_environment_is_never_published(tmp_path, monkeypatch):
    """Before: `--targ=DIR` (pip's abbreviation of --target) installed into DIR, the empty
    environment was published, and every later run reused it (packages null), exit 0. That
    option is refused up front now; pip's own configuration (PIP_TARGET) is another way to send
    the install elsewhere, caught by the check of what the environment holds."""
    import sys

    from harness.envs import EnvOptions, revision_env

    tree = revision_tree(tmp_path / "t", "detcheck_envprobe==2.0\n")
    wheels = wheel_folder(tmp_path / "wheels", "2.0")
    monkeypatch.setenv("PIP_TARGET", str(tmp_path / "elsewhere"))
    options = EnvOptions(pip_args=("--no-index", f"--find-links={wheels}"))
    env = revision_env(SHA, tree, options, sys.executable)
    assert (tmp_path / "elsewhere" / "detcheck_envprobe").is_dir()  # where pip put it
    assert "without what detcheck-requirements.txt names: detcheck_envprobe absent (pinned 2.0)" in env.error
    assert built_names() == []  # nothing published, nothing left half-built


@pytest.mark.slow
def test_the_pip_options_are_part_of_the_environments_key(tmp_path):
    """Before: switching --find-links from a folder of 1.0 to one of 2.0 reused the 1.0 build."""
    import sys

    from harness.envs import EnvOptions, revision_env

    tree = revision_tree(tmp_path / "t", "detcheck_envprobe\n")
    envs = [revision_env(SHA, tree, EnvOptions(pip_args=("--no-index", f"--find-links={folder}")), sys.executable)
            for folder in (wheel_folder(tmp_path / "one", "1.0"), wheel_folder(tmp_path / "two", "2.0"))]
    assert [env.packages for env in envs] == [{"detcheck_envprobe": "1.0"}, {"detcheck_envprobe": "2.0"}]
    assert envs[0].path != envs[1].path and len([name for name in built_names() if "." not in name]) == 2


def test_an_env_file_that_resolves_outside_the_tree_is_refused(tmp_path):
    """Before: a link to /etc/hostname made pip install a package named after that file's content."""
    import sys

    from harness.envs import DEFAULT_ENV_FILE, EnvOptions, revision_env

    outside = tmp_path / "outside.txt"
    outside.write_text("some-host-name\n")
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / DEFAULT_ENV_FILE).symlink_to(outside)
    with pytest.raises(UsageError, match=f"resolves to {outside}, outside the revision's tree"):
        revision_env(SHA, tree, EnvOptions(pip_args=("--no-index",)), sys.executable)
    assert built_names() == []


HANGING_BACKEND = """import time


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    time.sleep(600)  # a setup.py waiting on something that never comes
"""


@pytest.mark.slow
def test_a_build_that_hangs_is_killed_at_its_time_limit(tmp_path, no_leftovers):
    """Before: a package whose build hangs blocked the run forever (no limit)."""
    import sys

    from harness.envs import EnvOptions, revision_env

    tree = revision_tree(tmp_path / "t", "./hangs\n")
    (tree / "hangs").mkdir()
    (tree / "hangs" / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "hanging_backend"\nbackend-path = ["."]\n'
        '[project]\nname = "hangs"\nversion = "1"\n')
    (tree / "hangs" / "hanging_backend.py").write_text(HANGING_BACKEND)
    options = EnvOptions(pip_args=("--no-index", "--no-build-isolation"), build_timeout_s=3)
    env = revision_env(SHA, tree, options, sys.executable)
    assert env.error.startswith("pip install timed out after 3 s (the build's limit, --env-build-timeout)"), env.error
    assert built_names() == []


# -- what a report holds to paste: shell lines, Markdown, HTML ---------------------------


# Model directory names that run `touch PWNED` wherever a shell line leaves them unquoted (a
# command substitution) or quoted by hand with single quotes (a quote that ends the word).
HOSTILE_MODELS = ["m $(touch PWNED)", "m'; touch PWNED; '"]


def hostile_report(tmp_path: Path, model: str = HOSTILE_MODELS[0]) -> str:
    """report.md of a results.json whose strings are commands, Markdown and HTML: a model
    directory named `model`, a reproducer step whose title breaks its line, a commit subject of
    HTML, a log tail that closes its code fence."""
    from harness.report.markdown import MarkdownReport
    from harness.result_files import read_run

    data = json.loads(DEMO_RUN.read_text())
    data["base"]["subject"] = '<img src=x onerror="alert(1)"> **fix** [here](https://evil.invalid)'
    for cell in data["cells"]:
        argv = cell["metadata"]["server_argv"]
        argv[argv.index("--model-path") + 1] = str(tmp_path / "models" / model)
    comp = next(c for c in data["comparisons"] if c.get("reproducer"))
    comp["reproducer"]["requests"][0]["what"] = "start cold\ntouch PWNED\n```\n<script>alert(1)</script>"
    cell = data["cells"][0]
    cell.update(status="error", reason="<b>bold</b> reason", log_tail="last words\n```\n<script>alert(2)</script>")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(json.dumps(data))
    return MarkdownReport(read_run(tmp_path / "run")).render()


def code_span(line: str) -> str:
    """The text of the code span that ends `line` (CommonMark: a fence of n backticks)."""
    import re

    m = re.search(r"(`+) ?(.*?) ?\1$", line)
    assert m, line
    return m.group(2)


def test_the_server_args_line_pasted_into_a_shell_runs_nothing_and_gives_the_argv_back(tmp_path):
    import subprocess

    line = next(l for l in hostile_report(tmp_path).splitlines() if l.startswith("- server args"))
    args = code_span(line)
    echoed = subprocess.run(["sh", "-c", f"printf '%s\\n' {args}"], cwd=tmp_path, capture_output=True, text=True)
    assert not (tmp_path / "PWNED").exists(), line
    assert echoed.stdout.splitlines()[2:4] == ["--model-path", "…/models/m $(touch PWNED)"], echoed.stdout


def sh_blocks(report: str) -> list[list[str]]:
    """The lines of each ```sh block of `report` (each closed by its own fence)."""
    lines, blocks = report.splitlines(), []
    for start, line in enumerate(lines):
        if line.startswith("```") and line.endswith("sh"):
            blocks.append(lines[start + 1:lines.index(line[:-2], start + 1)])
    return blocks


def run_with_stubs(block: list[str], tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """`block` run whole by `sh -e` with `curl` and `python3` stubs on PATH that only record
    their argv: what ran, and each command's words as the shell passed them, in order."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(exist_ok=True)
    calls.write_text("")
    for stub in ("curl", "python3"):  # the requests go nowhere, the server starts nowhere
        (bin_dir / stub).write_text(f"#!/bin/sh\n{{ printf '%s\\0' {stub} \"$@\"; printf '\\n'; }} >> '{calls}'\n")
        (bin_dir / stub).chmod(0o755)
    inherited = {k: v for k, v in os.environ.items() if k != "PORT"}  # the block's own default, unless `env` sets it
    proc = subprocess.run(["sh", "-e", "-c", "\n".join(block)], cwd=tmp_path, capture_output=True, text=True,
                          env={**inherited, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **env})
    return proc, [record.split("\0") for record in calls.read_text().split("\0\n")[:-1]]


def test_a_step_title_cannot_put_a_command_into_the_reproducers_sh_block(tmp_path):
    requests = next(b for b in sh_blocks(hostile_report(tmp_path)) if any(line.startswith("curl ") for line in b))
    assert "# start cold touch PWNED ``` &lt;script>" not in requests  # a shell comment is shell, not Markdown
    proc, argvs = run_with_stubs(requests, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "PWNED").exists(), requests
    assert all(line.startswith(("# ", "curl ", "PORT=", "BASE_PORT=", "for PORT in ", 'echo "# the server on port $PORT"'))
               or line == "done" for line in requests), requests
    # to each side's server in turn
    assert [argv[0] for argv in argvs] == ["curl"] * 2 * sum(line.startswith("curl ") for line in requests)


@pytest.mark.parametrize("model", HOSTILE_MODELS)
def test_a_reproducers_sh_blocks_pasted_whole_run_nothing_but_the_server_and_curl(tmp_path, model):
    """Both ```sh blocks of a *different* row's reproducer (its servers, its requests), each run
    whole by `sh` with stubs for the server's python3 and for curl: nothing of the model
    directory's name runs, each side's server gets its recorded argv word for word on a port of
    its own from the shell's $PORT, and the requests go to each in turn."""
    blocks = sh_blocks(hostile_report(tmp_path, model))
    servers, requests = blocks[:2]
    for block in blocks:
        assert subprocess.run(["sh", "-n", "-c", "\n".join(block)], capture_output=True).returncode == 0, block
    recorded = next(c for c in json.loads(DEMO_RUN.read_text())["cells"]
                    if c["probe"] == "prefill_cache_hit")["metadata"]["server_argv"]
    port = recorded.index("--port") + 1
    shown = [*recorded]
    shown[shown.index("--model-path") + 1] = str(tmp_path / "models" / model)  # as the run used it
    lines = [line for line in servers if line.startswith("env ")]  # a line per side, each its own port
    assert [shlex.split(line) for line in lines] == [
        ["env", "PYTHONPATH=python", "python3", *shown[:port], variable, *shown[port + 1:]]
        for variable in ("$BASE_PORT", "$CANDIDATE_PORT")]

    proc, argvs = run_with_stubs(servers, tmp_path, PORT="4321")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "PWNED").exists(), servers
    assert argvs == [["python3", *shown[:port], p, *shown[port + 1:]] for p in ("4321", "4322")]
    proc, argvs = run_with_stubs(requests, tmp_path)  # PORT unset: SGLang's default
    assert proc.returncode == 0 and not (tmp_path / "PWNED").exists(), (proc.stderr, requests)
    assert [argv[6] for argv in argvs] == [f"http://127.0.0.1:{p}{path}" for p in (30000, 30001) for path in
                                           ("/flush_cache", "/generate", "/generate", "/flush_cache", "/generate")]


def outside_code_blocks(report: str) -> tuple[list[str], list[list[str]]]:
    """The report's lines outside fenced code blocks, and each block's lines, as CommonMark
    reads them: a block ends at a line of at least as many backticks as opened it, nothing else."""
    import re

    prose, blocks, fence = [], [], None
    for line in report.splitlines():
        run = re.match(r"(`{3,})", line)
        if fence is None and run:
            fence, block = run.group(1), []
        elif fence is not None and re.fullmatch(rf"{fence}`*\s*", line):
            blocks.append(block)
            fence = None
        elif fence is not None:
            block.append(line)
        else:
            prose.append(line)
    return prose, blocks


def test_strings_of_a_results_file_bring_no_html_or_markdown_into_the_report(tmp_path):
    prose, blocks = outside_code_blocks(hostile_report(tmp_path))
    text = "\n".join(prose)
    for tag in ("<img", "<script", "<b>"):
        assert tag not in text, tag
    assert "[here](" not in text and "\\[here\\]" in text  # a link escaped, shown as typed
    assert "**fix**" not in text and "\\*\\*fix\\*\\*" in text
    # the log tail is shown as it is, its ``` line inside its block
    assert ["last words", "```", "<script>alert(2)</script>"] in blocks, blocks


# -- names that are not UTF-8 ------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["md", "console", "json"])
def test_a_results_file_with_names_that_are_not_utf8_renders_every_format(tmp_path, fmt):
    """Names the file system gave as undecodable bytes reach results.json as surrogate escapes
    (`\\udcff`): report.md and every printed format show them, never a UnicodeEncodeError."""
    from conftest import detcheck

    data = json.loads(DEMO_RUN.read_text())
    data["suite"] = "suite-\udcff"
    for cell in data["cells"]:
        argv = cell["metadata"]["server_argv"]
        argv[argv.index("--model-path") + 1] = "/models/m-\udcfe/weights"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(json.dumps(data))  # ASCII: \udcff escaped
    proc = detcheck("report", str(tmp_path / "run"), "--format", fmt)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    report = (tmp_path / "run" / "report.md").read_text()  # UTF-8, as every report is
    assert "suite-\ufffd" in report and "m-\ufffd" in report


@pytest.mark.slow
def test_a_run_whose_suite_and_out_names_are_not_utf8_writes_its_report(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT, refserver_suite

    text = refserver_suite(tmp_path / "plain.toml", ["kl"]).read_bytes()
    root = os.fsencode(tmp_path)
    suite, out = root + b"/suite-\xff.toml", root + b"/out-\xfe"
    with open(suite, "wb") as f:
        f.write(text.replace(b'name = "plain"', b'name = "plain-\xc3\xa9"'))
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--suite", suite, "--out", out,
                           "--no-progress", "--format", "md"], cwd=ROOT, capture_output=True, timeout=300)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr[-3000:]
    report = (Path(os.fsdecode(out)) / "report.md").read_text()
    assert "## detcheck `plain-é` on refserver" in report and proc.stdout.decode().startswith("## detcheck")
