"""`detcheck localize`: which module an exact *different* row's sides first differ in, from both
sides' tensor dumps on its reproducer (harness/localize.py, harness/dumpdiff.py).

Unit tests of the culprit rule on dump sequences in SGLang's naming; a golden file of the section
rendered from a real localize.json (the e2e run below, the model path made project-relative);
end to end (slow): a reference-server repository whose candidate plants `mlp-scale` (layer 1's
MLP output × 1.01), `detcheck run` of revision_kl, then `detcheck localize` names
model.layers.1.mlp; rows it must refuse, and a revision without the dumper, are exit 2.
"""

from __future__ import annotations

import json

import pytest

from conftest import DATA, detcheck, refserver_suite
from harness.fixture_repo import FixtureRepo
from harness.localize import SCHEMA, Culprit, Localization, Tensor, culprit, markdown
from harness.result_files import read_json
from test_golden import check_golden

NI = "non_intrusive__"


def t(name: str, equal: bool = True, layer: int | None = None, why: str = "") -> Tensor:
    return Tensor(name, 3, layer, equal, None if equal else 0.5, why)


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
    assert culprit([*LAYER_1, t(f"{NI}model.norm.output", False, why="dumped by the base only")]).kind == "one-side"


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
