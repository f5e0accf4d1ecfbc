"""`run --resume --out D`: D's run continued with its own options (results.json's
metadata.options), at the shas it measured; an option given with it that changes what is
compared is exit 2 naming it, so D is never overwritten by another comparison. The end-to-end
resume after an interrupt is in test_faults.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, git, make_sglang_repo, refserver_suite
from harness.cli import parse
from harness.commands.run import recorded_options, resumed_run
from harness.errors import UsageError


def sha(repo: Path, ref: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", ref], capture_output=True, text=True,
                          check=True).stdout.strip()


class StoredRun:
    """An --out holding a run of `repo` main~1 vs main, started with `options`, as `run` records it."""

    def __init__(self, root: Path, *options: str):
        self.repo = make_sglang_repo(root)
        self.suite = refserver_suite(root / "suite.toml", ["kl"], targets=("sglang",))
        self.out = root / "out"
        self.out.mkdir()
        args = parse(["run", "--repo", str(self.repo), "--base", "main~1", "--candidate", "main",
                      "--suite", str(self.suite), "--out", str(self.out), *options])
        data = json.loads((DATA / "demo-cache.json").read_text())
        data["target"] = "sglang"
        data["base"] = {"ref": "main~1", "sha": sha(self.repo, "main~1")}
        data["candidate"] = {"ref": "main", "sha": sha(self.repo, "main")}
        data["metadata"]["options"] = recorded_options(args)
        self.results = self.out / "results.json"
        self.results.write_text(json.dumps(data))

    def resume(self, *given: str):
        args = parse(["run", "--resume", "--out", str(self.out), *given])
        return args, resumed_run(args)


def test_resume_with_no_option_continues_the_stored_comparison(tmp_path):
    stored = StoredRun(tmp_path, "--config", "det", "--set", "kl.tau=1e-6", "--python", sys.executable,
                       "--slots", "3", "--", "--page-size", "16")
    candidate_sha = sha(stored.repo, "main")
    git(stored.repo, "commit", "-q", "--allow-empty", "-m", "main moves on after the run started")
    with pytest.raises(UsageError, match=r"ran with --python=\S+ \(this run: this detcheck's interpreter\), "
                                         r"--server-arg=--page-size --server-arg=16 \(this run: none\)"):
        stored.resume()  # the interpreter and server arguments it records: run only when asked
    args, resumed = stored.resume("--trust-recorded")
    assert (args.repo, args.suite, args.target) == (stored.repo, stored.suite, "sglang")
    assert (args.config, args.overrides, args.server_arg) == (["det"], ["kl.tau=1e-6"], ["--page-size", "16"])
    assert (args.python, args.slots) == (sys.executable, 3)
    # At the shas the run measured, named as it named them: a branch that moved is not followed.
    assert (resumed.base.ref, resumed.base.sha) == ("main~1", sha(stored.repo, "main~2"))
    assert (resumed.candidate.ref, resumed.candidate.sha) == ("main", candidate_sha)


@pytest.mark.parametrize("given, refused", [
    (("--candidate", "main~1"), r"--candidate main~1 \(at \w{12}\) is not what the run in \S+ compared "
                                r"\(main at \w{12}\); leave --candidate out to continue that run"),
    (("--set", "kl.tau=1e-3"), r"--set kl.tau=1e-3 is not what the run in \S+ compared \(kl.tau=1e-6\)"),
    (("--config", "other"), r"--config other is not what the run in \S+ compared \(none\)"),
    (("--target", "refserver"), r"--target refserver is not what the run in \S+ compared \(sglang\)"),
    (("--server-arg=--page-size",), r"--server-arg --page-size is not what the run in \S+ compared \(none\)"),
], ids=["candidate", "set", "config", "target", "server-arg"])
def test_resume_refuses_an_option_that_changes_the_comparison(tmp_path, given, refused):
    stored = StoredRun(tmp_path, "--set", "kl.tau=1e-6")
    before = stored.results.read_bytes()
    with pytest.raises(UsageError, match=refused):
        stored.resume(*given)
    assert stored.results.read_bytes() == before


def test_resume_refuses_another_suite_or_repo(tmp_path):
    stored = StoredRun(tmp_path / "a")
    other = StoredRun(tmp_path / "b")
    with pytest.raises(UsageError, match=r"--suite \S+/b/suite.toml is not what the run in \S+ compared "
                                         r"\(\S+/a/suite.toml\)"):
        stored.resume("--suite", str(other.suite))
    with pytest.raises(UsageError, match=r"--repo \S+/b/sglang is not what the run in \S+ compared"):
        stored.resume("--repo", str(other.repo))


def test_resume_takes_options_that_agree_or_only_say_how_it_runs(tmp_path):
    stored = StoredRun(tmp_path, "--set", "kl.tau=1e-6")
    args, resumed = stored.resume("--base", sha(stored.repo, "main~1"), "--suite", str(stored.suite.parent / "." / "suite.toml"),
                                  "--set", "kl.tau=0.000001", "--slots", "4")
    assert resumed.base.ref == "main~1" and args.slots == 4


def test_resume_of_a_run_that_recorded_no_options_says_so(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text((DATA / "demo-cache.json").read_text())
    with pytest.raises(UsageError, match=r"the run in \S+ does not record its options .*; run it again with --force"):
        resumed_run(parse(["run", "--resume", "--out", str(out)]))


def test_run_without_suite_or_resume_is_told_what_it_needs(capsys):
    from harness.cli import main

    assert main(["run", "--repo", "/nowhere"]) == 2
    assert "--suite is required (or `--resume --out DIR`" in capsys.readouterr().err


def test_a_run_without_out_goes_under_the_cache_not_the_working_directory(isolated_cache, capsys):
    """Before: results/runs/ in whatever checkout was the working directory (an SGLang one)."""
    from harness.commands.common_args import default_out

    out = default_out("default")
    assert out.parent == isolated_cache / "runs" and out.name.startswith("default-")
    assert capsys.readouterr().err == f"detcheck: no --out: writing to {out}\n"


def test_a_secret_among_the_options_is_never_recorded_and_must_be_given_again(tmp_path):
    stored = StoredRun(tmp_path, "--server-arg=--api-key", "--server-arg=sk-live-1234",
                       "--env-pip-arg=--index-url=https://user:hunter22@pypi.example/simple")
    assert "sk-live-1234" not in stored.results.read_text() and "hunter22" not in stored.results.read_text()
    with pytest.raises(UsageError, match=r"was given a secret in --server-arg, which results.json never keeps: "
                                         r"give --server-arg again as the run had it \(--api-key '<redacted>'\)"):
        stored.resume()
    args, _ = stored.resume("--server-arg=--api-key", "--server-arg=sk-live-1234",
                            "--env-pip-arg=--index-url=https://user:hunter22@pypi.example/simple")
    assert args.server_arg == ["--api-key", "sk-live-1234"]


def test_a_resumed_run_carries_every_earlier_session_and_its_report_keeps_the_first_command(tmp_path):
    """report.md read `command: detcheck run --resume …` and "0 server launches" after a resume
    that launched nothing: the command that started the run, each resume, and every session's
    launches now."""
    from harness.report.markdown import MarkdownReport
    from harness.results import RunResult

    stored = StoredRun(tmp_path)
    data = json.loads(stored.results.read_text())
    _, resumed = stored.resume()
    assert resumed.sessions == ({"command": data["metadata"]["command"], "launches": len(data["launches"])},)
    sessions = [{"command": "detcheck run --suite s.toml --out D", "launches": 2},
                {"command": "detcheck run --resume --out D", "launches": 0}]
    data["metadata"]["sessions"] = sessions
    stored.results.write_text(json.dumps(data))
    _, again = stored.resume()
    assert list(again.sessions) == sessions
    report = MarkdownReport(RunResult.from_dict({**data, "launches": []})).render()
    assert "- command: `detcheck run --suite s.toml --out D`\n- resumed: `detcheck run --resume --out D`" in report
    assert "2 server launches over 2 sessions (0 in the last, 0 healthy)" in report
