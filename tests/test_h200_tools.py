"""The GPU session's tools (tools/gpu/) that can be checked without a GPU: the backport patches against the
released 0.5.17 source (downloaded once, skipped when the registry is unreachable), and
raw_generate.py against the fault server. conformance.py's dry run is in
tests/conformance/test_sglang_kl_helpers.py."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, make_sglang_repo
from faultlib import Bench

PATCHES = sorted((ROOT / "tools/gpu/patches").glob("0.5.17-backport-*.patch"))
CACHE = Path.home() / ".cache" / "sglang-detcheck" / "sglang-0.5.17"


def release_wheel() -> Path:
    wheels = sorted(CACHE.glob("sglang-0.5.17-*.whl"))
    if not wheels:
        CACHE.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12", "--platform", "manylinux_2_34_x86_64", "--timeout", "10",
                            "--retries", "1", "-d", str(CACHE), "sglang==0.5.17"],
                           capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            pytest.skip("package registry unreachable")
        wheels = sorted(CACHE.glob("sglang-0.5.17-*.whl"))
    if not wheels:
        pytest.skip("could not download sglang==0.5.17 (registry unreachable?)")
    return wheels[0]


@pytest.mark.slow
def test_the_backports_apply_in_order_to_the_released_0_5_17_source(tmp_path):
    assert [p.name for p in PATCHES] == ["0.5.17-backport-mle-v-head-dim.patch",
                                         "0.5.17-backport-score-mod-int8-mask.patch"]
    touched = sorted({line[6:].strip() for p in PATCHES for line in p.read_text().splitlines()
                      if line.startswith("+++ b/")})
    with zipfile.ZipFile(release_wheel()) as wheel:
        for name in touched:  # python/sglang/... in the repo is sglang/... in the wheel
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_bytes(wheel.read(name.removeprefix("python/")))
    git = ["git", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    for patch in PATCHES:
        proc = subprocess.run([*git, "apply", str(patch)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{patch.name}: {proc.stderr}"
    backend = (tmp_path / "python/sglang/srt/layers/attention/triton_backend.py").read_text()
    assert "elif mambaish_config(model_runner.model_config) is not None:" in backend
    assert "def get_v_head_dim(self):" in (tmp_path / "python/sglang/srt/mem_cache/swa_memory_pool.py").read_text()
    kernel = (tmp_path / "python/sglang/kernels/ops/attention/extend_attention.py").read_text()
    assert kernel.count("custom_mask != 0") == 3


def run_tool(tool: str, bench: Bench, config: str, out: Path, pythonpath: str = "") -> subprocess.CompletedProcess:
    """tools/gpu/`tool`.py on the configuration `config` of the bench's suite, at the bench repo's main
    (`pythonpath`: more of it, ahead of the fault server's)."""
    return subprocess.run([sys.executable, str(ROOT / f"tools/gpu/{tool}.py"), "--suite", str(bench.suite),
                           "--config", config, "--repo", str(bench.repo), "--ref", "main", "--python", bench.python,
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (pythonpath, *Bench.env().values()))),
                               "DETCHECK_CACHE_DIR": str(bench.root / "cache")})


@pytest.mark.slow
def test_raw_generate_counts_the_nulls_a_server_answers(tmp_path, bare_python):
    """tools/gpu/raw_generate.py against the fault server posing as SGLang: a detcheck run's
    arguments (the suite's, and --fault null-replay-logprobs), plain HTTP, the nulls where the
    server put them (the cold replay's), none elsewhere."""
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"nulls": ["--fault", "null-replay-logprobs"]}, startup_timeout_s=60,
                      request_timeout_s=60)
    out = tmp_path / "raw"
    proc = run_tool("raw_generate", bench, "nulls", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((out / "raw_generate.json").read_text())
    assert "--fault" in record["argv"] and "null-replay-logprobs" in record["argv"]
    rows = {(r["request"], r["field"]): r for r in record["rows"]}
    assert rows[("decode, logprobs", "output_token_logprobs")]["nulls"] == 0
    assert rows[("decode, logprobs + top-8", "output_token_logprobs")]["nulls"] == 0
    replay = rows[("cold replay", "input_token_logprobs")]
    assert replay["prompts_with_nulls"] == 2 and replay["nulls_in_replayed_output"] > 0
    assert "| cold replay | `input_token_logprobs` | 2 of 2 |" in (out / "raw_generate.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("faults, dropped", [([], []), (["--fault", "drop-first-logprob"], [0])])
def test_retract_logprobs_names_the_position_whose_logprob_the_server_dropped(tmp_path, bare_python, faults, dropped):
    """tools/gpu/retract_logprobs.py against the fault server posing as SGLang (no /metrics, as
    SGLang without --enable-metrics): every request of its plan answered; per prompt, the
    positions whose logprob is missing, none where the server drops none, position 0 where it
    drops each decode's first (as 0.5.16 did for a request retracted at its prefill)."""
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"c": faults}, startup_timeout_s=60, request_timeout_s=60)
    out = tmp_path / "retract"
    proc = run_tool("retract_logprobs", bench, "c", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((out / "retract_logprobs.json").read_text())
    assert record["argv"] and "launch_failure" not in record
    assert len(record["requests"]) == 7  # three rounds of two batches, and prompt 0 alone
    prompts = [p for r in record["requests"] for p in r["prompts"]]
    assert prompts and all(p["generated"] == p["logprobs"] + len(dropped) and p["dropped"] == dropped for p in prompts)
    assert (out / "retract_logprobs.md").exists()


# The fault server, taking what SGLang takes: an API key, and a flag whose name says nothing but
# whose --help says it is a password (redaction.help_secret_flags finds it).
KEYED_SERVER = '''
from faults import server

plain_parser = server.build_parser


def build_parser():
    parser = plain_parser()
    parser.add_argument("--api-key", help="the key clients send")
    parser.add_argument("--admin-word", help="the admin password")
    return parser


server.build_parser = build_parser
server.main()
'''
SECRET, HELP_SECRET = "hunter2-plain-words", "swordfish-admin"  # no credentials by their form


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["raw_generate", "retract_logprobs"])
def test_a_tool_records_and_prints_the_server_argv_redacted_and_shell_quoted(tmp_path, bare_python, tool):
    """A configuration whose args carry `--api-key SECRET` and a flag its server's --help calls a
    password, its `--state` a path with a space: the record's argv has both values masked, the
    .md's line of it is that argv shell-quoted (it splits back into it), and neither value is in
    either file or the tool's output."""
    root = tmp_path / "a bench"
    (root / "server").mkdir(parents=True)
    (root / "server" / "keyed_faults.py").write_text(KEYED_SERVER)
    bench = Bench(root, bare_python, make_sglang_repo(root, module="keyed_faults"))
    bench.write_suite({"keyed": ["--api-key", SECRET, f"--admin-word={HELP_SECRET}"]}, startup_timeout_s=60,
                      request_timeout_s=60)
    out = tmp_path / tool
    proc = run_tool(tool, bench, "keyed", out, pythonpath=str(root / "server"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    argv = json.loads((out / f"{tool}.json").read_text())["argv"]
    assert argv[argv.index("--api-key") + 1] == "<redacted>" and "--admin-word=<redacted>" in argv
    assert str(bench.state / "keyed") in argv
    markdown = (out / f"{tool}.md").read_text()
    printed = next(line for line in markdown.splitlines() if line.startswith("    "))
    assert shlex.split(printed) == argv
    for text in ((out / f"{tool}.json").read_text(), markdown, proc.stdout, proc.stderr):
        assert SECRET not in text and HELP_SECRET not in text


def test_a_kit_interpreter_puts_the_checkout_before_the_kit_and_keeps_the_env_files_other_settings(tmp_path):
    """tools/gpu/kit-python.sh: the revision's checkout (what detcheck passes on PYTHONPATH) is
    imported before the kit's tree, the kit's env file sets what it sets but its PYTHONPATH (a
    release's sglang) is dropped."""
    checkout, site, release = (tmp_path / name for name in ("checkout", "site", "release"))
    for root, version in ((checkout, "checkout"), (site, "kit"), (release, "kit's release")):
        (root / "sglang").mkdir(parents=True)
        (root / "sglang" / "__init__.py").write_text(f"WHERE = {version!r}\n")
    (site / "flashinfer.py").write_text("VERSION = '0.6.18'\n")
    env_file = tmp_path / "kit2env.sh"
    env_file.write_text(f"export PYTHONPATH={release}\nexport LD_PRELOAD_STUB_SEEN=stub\n")
    made = subprocess.run(["bash", str(ROOT / "tools/gpu/kit-python.sh"), "kit2", str(site), str(env_file)],
                          capture_output=True, text=True, env={**os.environ, "KIT_PYTHON_DIR": str(tmp_path),
                                                               "PY": sys.executable})
    assert made.returncode == 0, made.stderr
    python = made.stdout.strip()
    assert python == str(tmp_path / "py-kit2")
    probe = ("import os, sglang, flashinfer; "
             "print(sglang.WHERE, flashinfer.VERSION, os.environ['LD_PRELOAD_STUB_SEEN'])")
    ran = subprocess.run([python, "-c", probe], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(checkout)})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["checkout", "0.6.18", "stub"]
    bad = subprocess.run(["bash", str(ROOT / "tools/gpu/kit-python.sh"), "kit 2", str(site)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "NAME must be" in bad.stderr


@pytest.mark.slow
def test_a_pair_whose_sides_run_on_two_kits_interpreters_serves_each_side_from_its_own_kit(tmp_path):
    """`run --base-python` / `--candidate-python` with kit-python.sh's interpreters (0.5.17 on the
    first kit against 0.5.18 on kit2, rehearsed on the reference server): each side's servers
    import its own kit's packages (detcheck_envprobe stands for torch and sglang-kernel), and its
    cells are keyed by that interpreter."""
    from conftest import refserver_suite, run_pair
    from harness.fixture_repo import FixtureRepo
    from harness.metadata import interpreter_id

    pythons = {}
    for kit, version in (("kit1", "2.11"), ("kit2", "2.13")):
        site = tmp_path / kit
        (site / "detcheck_envprobe").mkdir(parents=True)
        (site / "detcheck_envprobe" / "__init__.py").write_text(f'__version__ = "{version}"\n')
        made = subprocess.run(["bash", str(ROOT / "tools/gpu/kit-python.sh"), kit, str(site)], capture_output=True,
                              text=True, env={**os.environ, "KIT_PYTHON_DIR": str(tmp_path), "PY": sys.executable},
                              check=True)
        pythons[kit] = made.stdout.strip()
    repo = FixtureRepo.create(tmp_path / "repo")
    repo.set_release("0.5.16")
    base = repo.commit("model SGLang 0.5.16")
    repo.set_release("0.5.17")
    candidate = repo.commit("model SGLang 0.5.17")
    suite = refserver_suite(tmp_path / "suite.toml", ["kl"])
    _, result, _ = run_pair(repo, base, candidate, suite, tmp_path / "out", "--base-python", pythons["kit1"],
                            "--candidate-python", pythons["kit2"], env={"DETCHECK_CACHE_DIR": str(tmp_path / "cache")})
    keys = {c["role"]: c["key"]["interpreter"] for c in result["cells"]}
    assert keys == {"base": interpreter_id(pythons["kit1"]), "candidate": interpreter_id(pythons["kit2"])}
    for role, version in (("base", "2.11"), ("candidate", "2.13")):
        logs = "".join(p.read_text() for p in (tmp_path / "out" / "logs").glob(f"*-{role}-*.log"))
        assert f"detcheck_envprobe {version}" in logs, role
