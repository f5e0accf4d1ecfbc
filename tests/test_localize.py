"""`detcheck localize`: which module an exact *different* row's sides first differ in, from both
sides' tensor dumps on its reproducer (harness/localize.py, harness/dumpdiff.py).

Unit tests of the culprit rule on dump sequences in SGLang's naming; a golden file of the section
rendered from a real localize.json (the e2e run below, the model path made project-relative);
end to end (slow): a reference-server repository whose candidate plants `mlp-scale` (layer 1's
MLP output × 1.01), `detcheck run` of revision_kl, then `detcheck localize` names
model.layers.1.mlp; rows it must refuse, and a revision without the dumper, are exit 2. What it
must never read as agreement (a tensor one side alone dumped, a tensor against a non-tensor, a
reproducer whose answers no longer differ, nothing compared) and what of a results.json it must
not run as recorded (a non-local host, a redacted secret, code-loading variables, another program).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import DATA, detcheck, refserver_suite
from harness.fixture_repo import FixtureRepo
from harness.dumpdiff import compare_dirs, compare_values
from harness.localize import SCHEMA, Culprit, Localization, Tensor, culprit, markdown, summary
from harness.result_files import read_json
from harness.results import Role
from test_golden import check_golden

NI = "non_intrusive__"


def t(name: str, equal: bool = True, layer: int | None = None, only: Role | None = None) -> Tensor:
    return Tensor(name, 3, layer, equal, None if equal else 0.5, only=only)


LAYER_1 = [t("input_ids"), t(f"{NI}model.layers.1.inputs.2", layer=1),
           t(f"{NI}model.layers.1.input_layernorm.inputs.0", layer=1),
           t(f"{NI}model.layers.1.input_layernorm.output", layer=1),
           t(f"{NI}model.layers.1.mlp.inputs.2", layer=1)]


def test_a_differing_output_names_its_module_with_the_inputs_that_agreed():
    got = culprit([*LAYER_1, t(f"{NI}model.layers.1.mlp.output", False, 1)])
    assert got == Culprit("module", "model.layers.1.mlp", (f"{NI}model.layers.1.mlp.inputs.2",))


def test_a_differing_input_names_the_module_around_it():
    got = culprit([*LAYER_1[:4], t(f"{NI}model.layers.1.self_attn.inputs.2", False, 1)])
    assert got == Culprit("inline", "model.layers.1", (f"{NI}model.layers.1.inputs.2",))


def test_a_differing_batch_is_before_the_model_and_equal_dumps_are_after_it():
    assert culprit([t("input_ids", False)]).kind == "batch"
    assert culprit(LAYER_1) == Culprit("agree", None, ())
    assert culprit([*LAYER_1, t(f"{NI}model.norm.output", False, only=Role.BASE)]).kind == "one-side"


def test_a_root_output_is_the_root_model():
    got = culprit([t(f"{NI}model.norm.output"), t(f"{NI}output.next_token_logits", False)])
    assert got == Culprit("module", "", ())


def test_section_golden():
    stored = read_json(DATA / "localize-mlp-scale.json", "localize")
    assert stored["schema"] == SCHEMA
    loc = Localization.from_dict(stored["rows"][0])
    assert Localization.from_dict(loc.to_dict()) == loc
    check_golden(DATA / "localize-mlp-scale.md", markdown(loc))


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("localize")
    repo = FixtureRepo.create(tmp / "repo")
    base = repo.head()
    repo.edit("mlp-scale")
    cand = repo.commit("plant mlp-scale")
    suite = refserver_suite(tmp / "suite.toml", ["kl", "revision_kl"], prompts=2, output_len=4)
    env = {"DETCHECK_CACHE_DIR": str(tmp / "cache")}
    out = tmp / "run"
    proc = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", cand, "--suite", str(suite),
                    "--out", str(out), "--no-progress", "--format", "md", env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    return repo, out, env


@pytest.mark.slow
def test_localize_names_the_planted_module(planted_run):
    repo, out, env = planted_run
    proc = detcheck("localize", "--out", str(out), "--row", "det/revision_kl", "--repo", str(repo.path), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads((out / "localize.json").read_text())["rows"][0]
    assert (row["outcome"], row["module"]) == ("module", "model.layers.1.mlp")
    assert row["inputs_agreed"] == [f"{NI}model.layers.1.mlp.inputs.2"]
    first = row["entries"][-1]
    assert first["name"] == f"{NI}model.layers.1.mlp.output" and first["max_abs_diff"] > 0
    assert all(e["equal"] for e in row["entries"][:-1]) and row["compared"] == len(row["entries"])
    assert all(s["files"] > 0 and (out / s["dumps"]).is_dir() for s in row["sides"])
    assert "**Named:** model.layers.1.mlp: its inputs agree" in proc.stdout
    assert (out / "localize.md").read_text() == proc.stdout
    assert "--model-path fixtures/refmodels/" in proc.stdout and "--model-path /" not in proc.stdout  # no machine path


def step_tensors(dumps: Path, name: str) -> dict[int, list[int]]:
    """Each forward pass's dumped `name` (a tensor of ints), by step, from one side's dump files."""
    out = {}
    for path in dumps.glob(f"*___name={name}___*.pt"):
        step = int(path.name.split("___")[0].removeprefix("step="))
        out[step] = torch.load(path, weights_only=False)["value"].tolist()
    return out


@pytest.mark.slow
def test_localize_on_inkling_turns_its_prefill_graph_off_and_dumps_only_the_posted_requests(tmp_path):
    """Inkling's prefill runs a CUDA graph unless its own switch says otherwise (the reference
    server models SGLang #31681), and no hook fires in a replay: localize starts each side with the
    revision's graphs-off flags, as a graphs-off configuration does, and enables the dumper once
    the server is up, so forward pass 0 is the reproducer's prefill, never the warm-up's."""
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    repo.edit("mlp-scale")
    cand = repo.commit("plant mlp-scale")
    config = json.loads((Path(__file__).resolve().parents[1] / "fixtures/refmodels/hybrid/config.json").read_text())
    model = tmp_path / "inkling"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**config, "architectures": ["InklingForConditionalGeneration"]}))
    suite = refserver_suite(tmp_path / "suite.toml", ["revision_kl"], prompts=2, output_len=4)
    suite.write_text(suite.read_text().replace(str(Path(__file__).resolve().parents[1] / "fixtures/refmodels/hybrid"),
                                               str(model)))
    env = {"DETCHECK_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "run"
    proc = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", cand, "--suite", str(suite),
                    "--out", str(out), "--no-progress", "--format", "md", env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    proc = detcheck("localize", "--out", str(out), "--row", "det/revision_kl", "--repo", str(repo.path), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads((out / "localize.json").read_text())["rows"][0]
    assert (row["outcome"], row["module"]) == ("module", "model.layers.1.mlp")
    comp = next(c for c in json.loads((out / "results.json").read_text())["comparisons"]
                if c["probe"] == "revision_kl")
    posted = comp["reproducer"]["requests"][0]["body"]["input_ids"]  # a teacher-forced score: one prefill
    for side in row["sides"]:
        assert side["argv"][-4:] == ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill",
                                     "disabled"], side["argv"]
        passes = step_tensors(out / side["dumps"], "input_ids")
        assert passes[0] == posted, passes  # the reproducer's prefill, dumped (not replayed)
        assert [0, 1, 2] not in passes.values() and [3] not in passes.values(), passes  # no warm-up pass
    assert row["entries"][-1]["step"] == 0  # found in that prefill


@pytest.mark.slow
def test_a_row_that_is_not_an_exact_different_is_refused(planted_run):
    repo, out, env = planted_run
    proc = detcheck("localize", "--out", str(out), "--row", "det/kl", "--repo", str(repo.path), env=env)
    assert proc.returncode == 2 and "not an exact different: nothing to localize" in proc.stderr
    proc = detcheck("localize", "--out", str(out), "--row", "det/nope", "--repo", str(repo.path), env=env)
    assert proc.returncode == 2 and "no such row" in proc.stderr


@pytest.mark.slow
def test_a_revision_without_the_dumper_is_refused_in_one_line(planted_run, tmp_path):
    repo, out, env = planted_run
    (repo.path / "python" / "refserver" / "dumper.py").write_text("def unrelated(): pass\n")
    repo.commit("a dumper without module hooks")
    result = json.loads((out / "results.json").read_text())
    result["candidate"] = {**result["candidate"], "ref": repo.head(), "sha": repo.head()}
    moved = tmp_path / "run"
    moved.mkdir()
    (moved / "results.json").write_text(json.dumps(result))
    proc = detcheck("localize", "--out", str(moved), "--row", "det/revision_kl", "--repo", str(repo.path), env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    error = [line for line in proc.stderr.splitlines() if line.startswith("detcheck: error")]
    assert error == [f"detcheck: error: the candidate ({repo.head()[:12]}) has no tensor dumper with module hooks "
                     f"(python/refserver/dumper.py, DUMPER_NON_INTRUSIVE_MODE): nothing can be localized there"]


def dump(directory: Path, *tensors: tuple[str, object]) -> None:
    """Files as SGLang's dumper names them, one forward pass, `(name, value)` in dump order."""
    directory.mkdir(parents=True)
    for index, (name, value) in enumerate(tensors, 1):
        torch.save({"value": value, "meta": {}}, directory / f"step=0___rank=0___dump_index={index}___name={name}"
                                                              f"___recompute_status=disabled.pt")


def localization(compared: dict) -> Localization:
    return Localization("det", "revision_kl", "refserver", 1, (), True, int(compared["compared"]),
                        int(compared["not_tensors"]), tuple(Tensor.from_dict(e) for e in compared["entries"]))


def test_a_tensor_only_the_candidate_dumped_is_a_difference(tmp_path):
    same = ("input_ids", torch.tensor([1, 2])), (f"{NI}model.norm.output", torch.ones(2))
    dump(tmp_path / "base", *same)
    dump(tmp_path / "cand", *same, (f"{NI}output.next_token_logits", torch.ones(3)))
    loc = localization(compare_dirs(tmp_path / "base", tmp_path / "cand"))
    assert loc.culprit.kind == "one-side"
    assert f"only the candidate dumped {NI}output.next_token_logits" in summary(loc)
    assert "agree" not in summary(loc)


def test_a_tensor_against_a_non_tensor_differs_and_two_non_tensors_are_not_compared():
    assert compare_values(torch.ones(2), [1.0, 1.0])["equal"] is False
    assert compare_values([1.0], torch.ones(1))["equal"] is False
    assert compare_values(None, None)["equal"] is None


def test_nothing_compared_is_never_agreement():
    loc = Localization("det", "revision_kl", "refserver", 1, (), True, 0, 3, ())
    assert loc.culprit.kind == "nothing-compared"
    assert "agree" not in summary(loc) and "no tensor was compared" in summary(loc)


def edited_run(out: Path, tmp_path: Path, edit) -> Path:
    """A copy of the run's results.json, every cell's metadata passed through `edit`."""
    result = json.loads((out / "results.json").read_text())
    for cell in result["cells"]:
        edit(cell["metadata"])
    moved = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    moved.mkdir()
    (moved / "results.json").write_text(json.dumps(result))
    return moved


@pytest.mark.slow
def test_a_reproducer_whose_sides_answer_alike_is_not_localized(planted_run, tmp_path):
    repo, out, env = planted_run
    result = json.loads((out / "results.json").read_text())
    result["candidate"] = {**result["candidate"], "ref": result["base"]["ref"], "sha": result["base"]["sha"]}
    moved = tmp_path / "run"
    moved.mkdir()
    (moved / "results.json").write_text(json.dumps(result))
    proc = detcheck("localize", "--out", str(moved), "--row", "det/revision_kl", "--repo", str(repo.path), env=env)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert ("the reproducer did not differ on the dumping servers (started with CUDA graphs off, as dumping needs: "
            "a difference only the run's servers make with graphs does not show there): both sides answered"
            in proc.stderr)
    assert "nothing to localize" in proc.stderr
    assert "agree" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_relaunch_binds_localhost_on_a_port_of_its_own_and_reads_the_users_secret(planted_run, tmp_path):
    repo, out, env = planted_run

    def anywhere_no_port(meta: dict) -> None:
        argv = [*meta["server_argv"]]
        argv[argv.index("--host") + 1] = "0.0.0.0"
        cut = argv.index("--port")
        meta["server_argv"] = [*argv[:cut], *argv[cut + 2:]]
        meta["server_env"] = {**meta.get("server_env", {}), "DETCHECK_TEST_TOKEN": "<redacted>"}

    moved = edited_run(out, tmp_path, anywhere_no_port)
    proc = detcheck("localize", "--out", str(moved), "--row", "det/revision_kl", "--repo", str(repo.path),
                    env={**env, "DETCHECK_TEST_TOKEN": "the-users-own"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads((moved / "localize.json").read_text())["rows"][0]
    assert row["module"] == "model.layers.1.mlp"
    for side in row["sides"]:
        argv = side["argv"]
        assert argv[argv.index("--host") + 1] == "127.0.0.1" and "0.0.0.0" not in argv and "--port" in argv


# What a results.json from elsewhere may record, and the one line localize refuses it with;
# each edit is given a directory holding a `sitecustomize.py` (what an interpreter whose path holds
# it imports at start) that creates `ran` there, as the recorded command's `-c` would.
REFUSED = {
    "redacted-env": (lambda m, d: m.update(server_env={"DETCHECK_TEST_TOKEN": "<redacted>"}),
                     "results.json records the server's DETCHECK_TEST_TOKEN as <redacted> (results keep no secret): "
                     "export DETCHECK_TEST_TOKEN with its value"),
    "redacted-flag": (lambda m, d: m.update(server_argv=[*m["server_argv"], "--api-key", "<redacted>"]),
                      "results.json records the server flag --api-key as <redacted> (results keep no secret): "
                      "pass its value with --secret-arg --api-key=VALUE"),
    "code-loading-env": (lambda m, d: m.update(server_env={"PYTHONPATH": str(d)}),
                         "results.json sets PYTHONPATH="),
    "another-program": (lambda m, d: m.update(server_argv=["-c", f"open({str(d / 'ran')!r}, 'w')", "--port", "30000"]),
                        "results.json's server argv does not start the refserver server (`-m refserver`)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", REFUSED)
def test_a_recorded_server_it_must_not_run_is_refused_in_one_line(planted_run, tmp_path, case):
    repo, out, env = planted_run
    edit, said = REFUSED[case]
    marker = tmp_path / "ran"
    (tmp_path / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w')\n")
    moved = edited_run(out, tmp_path, lambda meta: edit(meta, tmp_path))
    proc = detcheck("localize", "--out", str(moved), "--row", "det/revision_kl", "--repo", str(repo.path), env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    error = [line for line in proc.stderr.splitlines() if line.startswith("detcheck: error")]
    assert len(error) == 1 and said in error[0], proc.stderr[-2000:]
    assert not marker.exists() and not (moved / "localize").exists()
