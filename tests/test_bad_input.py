"""Bad input: exit 2 with a message naming the file, field, ref or option, and nothing launched.

Each case starts from a runnable `detcheck run` (the fault-server repo and a one-configuration
suite, see faultlib) and spoils one thing. "Nothing launched": the fault server records every
launch in its --state directory, and there is none; no server log either; and no process the
test started is alive afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, detcheck
from faultlib import Bench


def unwritable(tmp_path: Path) -> Path:
    """A directory path this process cannot create files under (root ignores mode bits, so for
    root the path goes through a regular file)."""
    if os.geteuid() == 0:
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        return blocker / "dir"
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    return locked / "dir"


def edit_suite(old: str, new: str):
    def prepare(bench: Bench, tmp_path: Path) -> tuple[list[str], dict]:
        text = bench.suite.read_text()
        assert old in text
        bench.suite.write_text(text.replace(old, new, 1))
        return bench.args(), {}
    return prepare


def probe_table(text: str):
    def prepare(bench: Bench, tmp_path: Path) -> tuple[list[str], dict]:
        bench.suite.write_text(bench.suite.read_text() + f"[probe.kl]\n{text}\n")
        return bench.args(), {}
    return prepare


def with_args(*extra: str, drop: tuple[str, ...] = ()):
    def prepare(bench: Bench, tmp_path: Path) -> tuple[list[str], dict]:
        args = bench.args(*extra)
        for option in drop:  # an option and its value
            i = args.index(option)
            del args[i:i + 2]
        return args, {}
    return prepare


def cache_unwritable(bench: Bench, tmp_path: Path) -> tuple[list[str], dict]:
    return bench.args(), {"DETCHECK_CACHE_DIR": str(unwritable(tmp_path))}


def out_unwritable(bench: Bench, tmp_path: Path) -> tuple[list[str], dict]:
    args = bench.args()
    args[args.index("--out") + 1] = str(unwritable(tmp_path))
    return args, {}


def not_a_repo(bench: Bench, tmp_path: Path) -> tuple[list[str], dict]:
    plain = tmp_path / "plain"
    plain.mkdir()
    args = bench.args()
    args[args.index("--repo") + 1] = str(plain)
    return args, {}


def resume_fresh(bench: Bench, tmp_path: Path) -> tuple[list[str], dict]:
    bench.out.mkdir()
    (bench.out / "results.json").write_text("{}")
    return bench.args("--resume", "--fresh"), {}


def duplicate_names(bench: Bench, tmp_path: Path) -> tuple[list[str], dict]:
    bench.write_suite({"a": [], "b": []})
    bench.suite.write_text(bench.suite.read_text().replace('name = "b"', 'name = "a"'))
    return bench.args(), {}


def out_holds_a_run(bench: Bench, tmp_path: Path) -> tuple[list[str], dict]:
    bench.out.mkdir()
    (bench.out / "results.json").write_text("{}")
    return bench.args(), {}


def bad_baseline(bench: Bench, tmp_path: Path) -> tuple[list[str], dict]:
    path = tmp_path / "b.json"
    path.write_text('{"version": 1, "entries": [], "colour": 1}')
    return bench.args("--baseline", str(path)), {}


def bad_matrix(text: str):
    def prepare(bench: Bench, tmp_path: Path) -> tuple[list[str], dict]:
        matrix = tmp_path / "matrix.toml"
        matrix.write_text(text)
        return ["matrix", "list", "--matrix", str(matrix)], {}
    return prepare


ENTRY = '[[entry]]\nname = "cpu"\ngpus = 0\ntarget = "refserver"\nsuites = ["suites/default.toml"]\n'

CASES = {
    "malformed-toml": (edit_suite("[models]", "[models"), r"suite\.toml: not valid TOML"),
    "unknown-top-level-field": (edit_suite('name = "faults"', 'name = "faults"\ncolour = "red"'),
                                r"suite\.toml: top level: unknown key 'colour' \(known: "),
    "unknown-config-field": (edit_suite("deterministic = true", "deterministic = true\nspeed = 3"),
                             r"suite\.toml: \[\[config\]\] #1: unknown key 'speed' \(known: "),
    "unknown-probe-in-suite": (edit_suite('probes = ["kl"]', 'probes = ["kl", "klx"]'),
                               r"suite\.toml: \[\[config\]\] 'only'\.probes: unknown probe 'klx'"),
    "unknown-probe-option": (with_args("--probe", "nope"), r"unknown probe 'nope' \(known: "),
    "missing-model-dir": (edit_suite("refmodels/hybrid", "refmodels/nowhere"),
                          r"suite\.toml: \[models\]\.sglang: model directory \S+/refmodels/nowhere "
                          r"has no config\.json"),
    "unresolvable-ref": (with_args("--candidate", "no-such-branch", drop=("--candidate",)),
                         r"git ref 'no-such-branch' does not resolve to a commit in \S+/sglang"),
    "not-a-git-repo": (not_a_repo, r"--repo \S+/plain: not a git repository"),
    "worktree-dir-unwritable": (cache_unwritable, r"worktree directory \S+/dir/worktrees/sglang-\w+ is not writable"),
    "out-dir-unwritable": (out_unwritable, r"--out \S+/dir is not writable"),
    "resume-with-fresh": (resume_fresh, r"--resume and --fresh contradict each other"),
    "resume-without-a-run": (with_args("--resume"), r"--resume needs --out pointing at an earlier run"),
    "base-without-repo": (with_args(drop=("--repo",)), r"--base/--candidate need --repo"),
    "host-in-server-arg": (with_args("--server-arg=--host=0.0.0.0"),
                           r"--server-arg: --host is set by the harness \(servers listen on 127\.0\.0\.1"),
    "port-in-suite-args": (edit_suite('args = ["--state"', 'args = ["--port", "80", "--state"'),
                           r"suite\.toml: \[\[config\]\] 'only'\.args: --port is set by the harness"),
    "missing-interpreter": (with_args("--python", "/nonexistent/python", drop=("--python",)),
                            r"--python /nonexistent/python: no such executable"),
    "missing-base-interpreter": (with_args("--base-python", "/nonexistent/python"),
                                 r"--base-python /nonexistent/python: no such executable"),
    "env-file-outside-the-tree": (with_args("--env-file", "../requirements.txt"),
                                  r"--env-file \.\./requirements\.txt: must be a path inside the revision's tree"),
    "matrix-unknown-field": (bad_matrix(ENTRY + 'colour = "red"\n'),
                             r"matrix\.toml: \[\[entry\]\] #1: unknown key 'colour' \(known: "),
    "matrix-malformed": (bad_matrix("[[entry]\n"), r"matrix\.toml: not valid TOML"),
    "matrix-host-in-server-args": (bad_matrix(ENTRY.replace("suites/", f"{ROOT}/suites/")
                                                 + 'server_args = ["--host", "0.0.0.0"]\n'),
                                   r"matrix\.toml: \[\[entry\]\] 'cpu'\.server_args: --host is set by the harness"),
    "config-key-typo": (edit_suite("deterministic = true", "determinstic = true"),
                        r"\[\[config\]\] #1: unknown key 'determinstic'; did you mean 'deterministic'\?"),
    "config-bool-as-string": (edit_suite("deterministic = true", 'deterministic = "no"'),
                              r"\[\[config\]\] 'only'\.deterministic: expected true or false, got a string 'no'"),
    "config-negative-interval": (edit_suite("deterministic = true", "deterministic = true\nmamba_track_interval = -5"),
                                 r"\[\[config\]\] 'only'\.mamba_track_interval: -5 is out of range"),
    "timeout-nan": (edit_suite("startup_timeout_s = 60", "startup_timeout_s = nan"),
                    r"\[server\]\.startup_timeout_s: must be a number of seconds in \(0, 86400\], got nan"),
    "config-name-too-long": (edit_suite('name = "only"', f'name = "{"x" * 500}"'),
                             r"\[\[config\]\] #1\.name: 'x{10}.*must be 1-64 ASCII letters"),
    "config-name-not-ascii": (edit_suite('name = "only"', 'name = "ünïcode"'),
                              r"\[\[config\]\] #1\.name: 'ünïcode' must be 1-64 ASCII letters"),
    "config-name-duplicate": (duplicate_names, r"suite\.toml: duplicate \[\[config\]\] names: a"),
    "out-holds-another-run": (out_holds_a_run,
                              r"--out \S+/out holds an earlier run; pass --resume to continue it or --force"),
    "baseline-bad-before-launch": (bad_baseline, r"b\.json: unknown key 'colour'"),
}
# A [probe.kl] line each, rejected by the probe's declared parameters.
CASES.update({f"probe-param-{name}": (probe_table(line), message) for name, (line, message) in {
    "typo": ("thresold = 1e-9", r"suite\.toml: \[probe\.kl\]: unknown key 'thresold'; did you mean 'threshold'\?"),
    "negative": ("output_len = -1", r"\[probe\.kl\]\.output_len: -1 is out of range \[1, 1e\+06\]"),
    "not-a-number": ('threshold = "abc"', r"\[probe\.kl\]\.threshold: expected a number, got a string 'abc'"),
    "float-for-int": ("prompts = 1.5", r"\[probe\.kl\]\.prompts: expected an integer, got a number 1\.5"),
    "string-for-int": ('prompts = "8"', r"\[probe\.kl\]\.prompts: expected an integer, got a string '8'"),
    "huge": ("prompts = 1000000000", r"\[probe\.kl\]\.prompts: 1000000000 is out of range \[1, 100000\]"),
}.items()})


# End to end (a real CLI process per case, ~1 s each): the full suite runs them, the fast loop
# relies on the unit tests of the same checks (test_plan, test_params, test_matrix).
@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_2_and_launches_nothing(tmp_path, bare_python, no_leftovers, case):
    prepare, message = CASES[case]
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"only": []})
    args, env = prepare(bench, tmp_path)
    proc = detcheck(*args, env={**bench.env(), **env}, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    # The only line allowed before the error is the target the run chose (common_args).
    said = re.sub(r"^detcheck: target \S+ \([^)]*\)\n", "", proc.stderr)
    assert said.startswith("detcheck: error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert re.search(message, proc.stderr), proc.stderr
    assert not bench.state.exists(), "a server was launched"
    assert not (bench.out / "logs").exists()


def test_a_mistyped_ref_or_suite_names_the_closest_one(tmp_path):
    from conftest import make_sglang_repo, refserver_suite
    from harness.errors import UsageError
    from harness.suite import load_suite
    from harness.revisions import Revision

    repo = make_sglang_repo(tmp_path)
    with pytest.raises(UsageError, match=r"git ref 'mian' does not resolve to a commit in \S+; did you mean 'main'\?"):
        Revision.resolve(repo, "mian")
    refserver_suite(tmp_path / "default.toml", ["kl"])  # the file the misspelled name is near
    with pytest.raises(UsageError, match=rf"suite file not found: {tmp_path}/defualt.toml; did you mean "
                                         rf"'{tmp_path}/default.toml'\?"):
        load_suite(tmp_path / "defualt.toml")
    # A bare name: the suite of that name in suites/ (as `--suite default` run from the project).
    (tmp_path / "suites").mkdir()
    refserver_suite(tmp_path / "suites" / "pools.toml", ["kl"])
    with pytest.raises(UsageError, match=rf"suite file not found: {tmp_path}/pools; did you mean "
                                         rf"'{tmp_path}/suites/pools.toml'\?"):
        load_suite(tmp_path / "pools")


def test_a_branch_only_the_remote_has_resolves_to_origins_saying_so(tmp_path, capsys):
    """A CI clone (actions/checkout, `git clone`) has only the default branch locally: `--base
    base` takes origin/base and says so; a ref no remote has either is still bad input."""
    from conftest import git, make_sglang_repo
    from harness.errors import UsageError
    from harness.revisions import Revision

    origin = make_sglang_repo(tmp_path)
    git(origin, "branch", "base", "main~1")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
    revision = Revision.resolve(clone, "base")
    assert (revision.ref, revision.sha) == ("origin/base", Revision.resolve(origin, "base").sha)
    assert f"git ref 'base' is no local branch in {clone}: using 'origin/base'" in capsys.readouterr().err
    with pytest.raises(UsageError, match=r"git ref 'bsae' does not resolve to a commit in .*; did you mean 'base'\?"):
        Revision.resolve(clone, "bsae")
