"""Hostile input, round 5 (issue 45): files a user owns, code a results file chooses, bytes a
terminal runs, secrets by the shape of their value, and the messages. Each test reproduces one
defect of the issue and failed before its fix."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from io import StringIO
from pathlib import Path

import pytest

from conftest import DATA, refserver_suite
from harness.errors import UsageError
from harness.results import RunResult

SOFTCAP = DATA / "softcap-verified.json"  # a run whose *different* rows carry verified reproducers


def stored_run(folder: Path, source: Path = SOFTCAP, edit=None) -> Path:
    """`source` copied into `folder` as its results.json, `edit(data)` applied first."""
    data = json.loads(source.read_text())
    if edit is not None:
        edit(data)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(data))
    return folder


# -- data loss ---------------------------------------------------------------------------


def test_an_out_holding_files_detcheck_did_not_write_is_refused_and_force_keeps_them(tmp_path):
    """Before: an --out without results.json was taken as empty: the user's report.md was
    overwritten by the run's, without --force."""
    from harness.commands.common_args import claim_out_dir

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("the user's own report")
    (out / "notes.txt").write_text("the user's notes")
    with pytest.raises(UsageError, match=rf"--out {out} holds files detcheck did not write \(notes.txt, report.md\)"):
        claim_out_dir(out, force=False)
    # --force replaces only what detcheck wrote: the user's report.md is where the run's goes
    with pytest.raises(UsageError, match=rf"--out {out}: report.md was not written by detcheck"):
        claim_out_dir(out, force=True)
    (out / "report.md").unlink()
    claim_out_dir(out, force=True)  # the notes stay beside the run
    assert (out / "notes.txt").read_text() == "the user's notes"
    claim_out_dir(tmp_path / "new", force=False)  # a folder not there yet, or empty: nothing to refuse


def test_make_model_never_replaces_a_checkpoint_without_force(tmp_path, capsys):
    from harness.cli import main

    config = Path(__file__).parents[1] / "fixtures" / "models" / "tiny-llama"
    out = tmp_path / "m"
    assert main(["make-model", str(config), "--out", str(out), "--seed", "1"]) == 0
    first = (out / "model.safetensors").read_bytes()
    (out / "config.json").write_text('{"edited": "by the user"}')
    capsys.readouterr()
    assert main(["make-model", str(config), "--out", str(out), "--seed", "2"]) == 2
    err = capsys.readouterr().err
    assert f"--out {out} holds config.json, generation_config.json, model.safetensors: pass --force to replace them" in err, err
    assert (out / "model.safetensors").read_bytes() == first
    assert (out / "config.json").read_text() == '{"edited": "by the user"}'
    assert main(["make-model", str(config), "--out", str(out), "--seed", "2", "--force"]) == 0
    assert (out / "model.safetensors").read_bytes() != first


HOLDER = """import sys
from pathlib import Path
from harness.commands.common_args import claim_out_dir
claim_out_dir(Path(sys.argv[1]), force=True)
print("claimed", flush=True)
sys.stdin.read()
"""


def test_one_writer_per_out_and_a_killed_one_leaves_it_free(tmp_path):
    """Before: two --force runs into one --out both went ahead, one's results and logs lost."""
    from harness.commands.common_args import claim_out_dir

    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "claimed\n"
        with pytest.raises(UsageError, match=rf"--out {out} is being written by another detcheck "
                                             rf"\(pid {holder.pid}\)"):
            claim_out_dir(out, force=True)
    finally:
        holder.kill()  # as a crash ends it: no cleanup of its own runs
        holder.wait(timeout=60)
    claim_out_dir(out, force=True)  # the lock went with the process


def test_a_lock_file_that_is_a_link_is_never_followed(tmp_path):
    from harness.commands.common_args import OUT_LOCK, claim_out_dir

    out, precious = tmp_path / "out", tmp_path / "precious"
    out.mkdir()
    precious.write_text("the user's")
    (out / OUT_LOCK).symlink_to(precious)
    with pytest.raises(UsageError, match=rf"--out {out} is not writable \({out / OUT_LOCK}: Too many levels of "
                                         rf"symbolic links\)"):
        claim_out_dir(out, force=True)
    assert precious.read_text() == "the user's"


# -- code a results file chooses ---------------------------------------------------------


@pytest.mark.parametrize("name, value", [
    ("OPENSSL_CONF", "/tmp/evil/openssl.cnf"), ("GCONV_PATH", "/tmp/evil"), ("PATH", "/tmp/evil:/usr/bin"),
    ("LD_PRELOAD", "/tmp/evil.so"), ("PYTHONPATH", "/tmp/evil"), ("MALLOC_CONF", "x"),
    ("SGLANG_EXTERNAL_MODEL_PACKAGE", "/tmp/evil"),  # a name a configuration may set, with a path
])
def test_localize_sets_only_what_a_configuration_may_set(name, value):
    """Before: only LD_*, DYLD_* and PYTHON* were kept out: OPENSSL_CONF loaded the file's .so."""
    from harness.localize import RecordedServer
    from harness.targets import get_target

    target = get_target("refserver", sys.executable)
    meta = {"server_argv": ["-m", "refserver", "--port", "1"], "server_env": {name: value}}
    with pytest.raises(UsageError, match=f"results.json sets {name}="):
        RecordedServer.checked(target, meta, {}, {})
    assert RecordedServer.checked(target, meta, {name: value}, {}).env == {name: value}  # as the suite sets it
    plain = {"SGLANG_SWA_EVICTION_INTERVAL": "16", "SGLANG_TEST_RETRACT": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert RecordedServer.checked(target, {**meta, "server_env": plain}, {}, {}).env == plain


PAYLOAD = "import os; os.system('touch /tmp/pwned')"


def test_a_recorded_argv_that_is_not_the_target_server_is_never_printed_as_a_command(tmp_path):
    """Before: report.md's "start each side's server" line was `python3 -c "import os; …"`."""
    from harness.report.markdown import MarkdownReport

    def another_program(data):
        for cell in data["cells"]:
            cell["metadata"]["server_argv"] = ["-c", PAYLOAD, "--port", "30000"]

    result = RunResult.from_dict(json.loads(stored_run(tmp_path, edit=another_program).joinpath("results.json")
                                            .read_text()))
    report = MarkdownReport(result).render()
    assert "os.system" not in report and "python3 -c" not in report
    assert "not shown: results.json's server argv does not start the refserver server (`-m refserver`)" in report


def resume_args(out: Path, *extra: str):
    from harness.cli import build_parser

    return build_parser().parse_args(["run", "--resume", "--out", str(out), *extra])


def recorded_programs(data):
    data["metadata"]["options"].update(repo=None, python="/opt/elsewhere/bin/python", env_pip_arg=["--index-url=https://x.invalid"],
                                       server_arg=["--enable-mixed-chunk"])


def test_resume_says_what_it_would_run_and_refuses_what_differs_unless_asked(tmp_path, capsys):
    """Before: --resume ran the stored interpreter, pip and server arguments without a word."""
    from harness.commands.run import resumed_run

    out = stored_run(tmp_path / "run", edit=recorded_programs)
    with pytest.raises(UsageError, match=r"--resume: the run in .* ran with --python=/opt/elsewhere/bin/python "
                                         r"\(this run: this detcheck's interpreter\).*--trust-recorded"):
        resumed_run(resume_args(out))
    err = capsys.readouterr().err
    assert "--python=/opt/elsewhere/bin/python" in err and "--env-pip-arg=--index-url=https://x.invalid" in err
    assert "--server-arg=--enable-mixed-chunk" in err
    # asked explicitly: given again as recorded, or all of them at once
    with pytest.raises(UsageError, match="--env-pip-arg"):
        resumed_run(resume_args(out, "--python=/opt/elsewhere/bin/python"))
    with pytest.raises(UsageError, match="give --repo"):  # past the check: the revisions are next
        resumed_run(resume_args(out, "--trust-recorded"))


def test_localize_posts_no_more_requests_than_a_reproducer_is_made_with(tmp_path):
    """Before: a results.json listing 100,000 requests had them all posted (past 300 s, 1.1 GB)."""
    from harness.localize import exact_different_row
    from harness.result_files import read_run

    def bloated(data):
        comp = next(c for c in data["comparisons"] if c["probe"] == "revision_kl")
        comp["reproducer"]["requests"] *= 100_000

    result = read_run(stored_run(tmp_path, edit=bloated))
    with pytest.raises(UsageError, match=r"--row det/revision_kl: its reproducer lists 100,000 requests; "
                                         r"localize posts at most 96"):
        exact_different_row(result, "det/revision_kl")
    assert exact_different_row(read_run(stored_run(tmp_path / "plain")), "det/revision_kl").probe == "revision_kl"


# -- bytes a terminal or a CI reader runs ------------------------------------------------

HOSTILE_REASON = "server said \x1b]0;pwned\x07\x1b[2J\x00\x9b31m done"


def test_control_characters_reach_no_renderer_but_json(tmp_path):
    """Before: the JUnit file was not well-formed XML and the console printed the sequences."""
    from rich.console import Console

    from harness.report.combined import combined_markdown
    from harness.report.console import ConsoleReport
    from harness.report.junit import junit_xml
    from harness.report.markdown import MarkdownReport

    def hostile(data):
        for cell in data["cells"]:
            if cell["probe"] == "kl":
                cell["status"], cell["reason"] = "error", HOSTILE_REASON
        for comp in data["comparisons"]:
            if comp["probe"] == "kl":
                comp.update(verdict="error", note=HOSTILE_REASON, metrics={}, decided_by=None, reproducer=None)
        data["suite"] = "suite\x1b[2J"

    path = stored_run(tmp_path, edit=hostile) / "results.json"
    result = RunResult.from_dict(json.loads(path.read_text()))
    xml = junit_xml(result)
    ET.fromstring(xml.encode())  # well-formed
    console = StringIO()
    ConsoleReport(result).print(Console(file=console, width=200))
    rendered = {"junit": xml, "console": console.getvalue(), "md": MarkdownReport(result).render(),
                "combined": combined_markdown([(tmp_path, result)])}
    for name, text in rendered.items():
        assert not [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0], name
        assert "\\x1b]0;pwned\\x07" in text.replace("\\\\", "\\"), name  # shown, escaped
    assert RunResult.from_dict(json.loads(json.dumps(result.to_dict()))).cells == result.cells  # JSON exact


# -- secrets -----------------------------------------------------------------------------

SECRET = "S3cr3t-Vaule_9"
ENDINGS = ("CRED", "CREDS", "SESSION", "PRIVATE", "SIGNING")


def secret_names() -> list[str]:
    """Every ending the issue names, under several prefixes and in each case."""
    return [spell(f"{prefix}{ending}") for ending in ENDINGS for prefix in ("DB_", "APP_X_", "A1_")
            for spell in (str.upper, str.lower, str.title)]


def secret_shapes() -> list[str]:
    """Values that hold a secret by their shape: a connection string's password (each keyword
    and spacing), a URL's query, a netrc line and block."""
    shapes = [f"Server=db;User Id=u;{key}{eq}{SECRET};Encrypt=yes" for key in ("Password", "password", "PASSWORD",
                                                                                "Pwd", "pwd", "passwd")
              for eq in ("=", " = ")]
    shapes += [f"host=db user=u {key}={SECRET} port=5432" for key in ("password", "Password")]
    shapes += [f"https://db.invalid/x?user=u&password={SECRET}&ssl=1",
               f"machine hub.invalid login u password {SECRET}",
               f"machine hub.invalid\n  login u\n  password {SECRET}\n",
               f"default login u password {SECRET}"]
    return shapes


@pytest.mark.parametrize("name", secret_names())
def test_names_ending_in_a_secret_word_are_masked(name):
    from harness.redaction import redact_env

    assert redact_env({name: SECRET}) == {name: "<redacted>"}


@pytest.mark.parametrize("name", ["CREDO_HOME", "SESSION_DIR", "PRIVATE_DIR", "SIGNING_FORMAT", "MODEL"])
def test_names_that_only_begin_with_such_a_word_are_kept(name):
    from harness.redaction import redact_env

    assert redact_env({name: "plain"}) == {name: "plain"}


@pytest.mark.parametrize("value", secret_shapes())
def test_a_secret_by_the_shape_of_its_value_is_masked_everywhere(value, tmp_path):
    from harness.redaction import environment_secrets, redact_argv, redact_command, redact_env, scrub_file

    env = {"DATABASE": value}
    assert SECRET not in json.dumps(redact_env(env))
    assert SECRET not in json.dumps(redact_argv(["--db", value]))
    assert SECRET not in json.dumps(redact_command(["detcheck", "run", f"--server-arg=--db={value}"]))
    log = tmp_path / "server.log"
    log.write_text(f"connecting to {value}\n")
    scrub_file(log, environment_secrets(env))
    assert SECRET not in log.read_text() and "connecting to" in log.read_text()


# -- messages ----------------------------------------------------------------------------

DEEP = "[" * 5000 + "]" * 5000


def test_deeply_nested_toml_is_one_line_of_bad_input(tmp_path, capsys):
    """Before: RecursionError, a traceback and exit 1."""
    from harness import cli
    from harness.matrix import load_matrix
    from harness.suite import load_suite

    suite = refserver_suite(tmp_path / "s.toml", ["kl"])
    suite.write_text(suite.read_text() + f"\n[probe.kl]\ndeep = {DEEP}\n")
    with pytest.raises(UsageError, match=rf"{suite}: nested deeper than"):
        load_suite(suite)
    matrix = tmp_path / "m.toml"
    matrix.write_text(f"deep = {DEEP}\n")
    with pytest.raises(UsageError, match=rf"{matrix}: nested deeper than"):
        load_matrix(matrix)
    code = cli.main(["run", "--suite", str(refserver_suite(tmp_path / "t.toml", ["kl"])), "--target", "refserver",
                     "--set", f"kl.tau={DEEP}",
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "--set kl.tau=[[[" in err and "nested deeper than" in err, err
    assert len([line for line in err.splitlines() if "error" in line]) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # bad input leaves no --out behind, nor its lock


def test_a_run_of_a_plugin_probe_not_installed_names_it_and_renders_as_stored(tmp_path, capsys):
    """Before: "results file altered, or written by another version", exit 2, nothing rendered."""
    from harness import cli

    def plugin(data):
        for item in (*data["cells"], *data["comparisons"]):
            if item["probe"] == "kl":
                item["probe"] = "vendor_probe"
        data["metadata"]["probe_params"]["vendor_probe"] = data["metadata"]["probe_params"].pop("kl", {})

    out = stored_run(tmp_path, edit=plugin)
    assert cli.main(["report", str(out), "--format", "md"]) == 0
    captured = capsys.readouterr()
    assert "probe vendor_probe is not installed" in captured.err and "altered" not in captured.err, captured.err
    assert "vendor_probe" in captured.out
    assert cli.main(["report", str(out), "--check", "--format", "md"]) == 2  # a verdict asked: not judged again
    assert "probe vendor_probe is not installed" in capsys.readouterr().err


def test_localize_md_holds_no_absolute_path_of_the_machine(tmp_path):
    """Before: the server column showed `--model-path /home/…/models/hybrid`."""
    from harness.commands.localize import section
    from harness.localize import Localization
    from harness.result_files import read_json

    row = read_json(DATA / "localize-mlp-scale.json", "localize")["rows"][0]
    for side in row["sides"]:
        side["argv"][side["argv"].index("--model-path") + 1] = "/home/alice/models/hybrid"
    text = section(Localization.from_dict(row))
    assert "/home/alice" not in text and "--model-path …/models/hybrid" in text
