"""Result files: atomic writes, readable errors, and the schema history (old files still load)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import DATA
from harness.errors import CorruptResult
from harness.result_files import atomic_write_json, read_cell, read_run, upgraded, write_cell, write_run
from harness.results import SCHEMA_VERSION, RunResult

SCHEMA1 = DATA / "schema1-results.json"


def test_schema1_run_upgrades_to_current():
    raw = json.loads(SCHEMA1.read_text())
    assert raw["schema"] == 1, "this file must stay a schema-1 document: it tests the upgrader"
    run = read_run(SCHEMA1)
    assert run.schema == SCHEMA_VERSION
    assert len(run.cells) == len(raw["cells"]) and all(c.key is None for c in run.cells)
    assert [c.verdict.value for c in run.comparisons] == [c["verdict"] for c in raw["comparisons"]]


def test_upgraded_run_round_trips_at_the_current_schema(tmp_path):
    run = read_run(SCHEMA1)
    write_run(tmp_path, run)
    assert read_run(tmp_path) == run
    assert json.loads((tmp_path / "results.json").read_text())["schema"] == SCHEMA_VERSION


def test_schema1_cell_upgrades(tmp_path):
    cell = read_run(SCHEMA1).cells[0]
    old = {**cell.to_dict(), "schema": 1}
    old.pop("key")
    path = tmp_path / "cell.json"
    from harness.result_files import content_digest
    atomic_write_json(path, {**old, "digest": content_digest(old)})
    assert read_cell(path) == cell


def test_unknown_schema_names_the_file(tmp_path):
    with pytest.raises(CorruptResult, match=r"schema 99, expected"):
        upgraded(tmp_path / "x.json", "results", {"schema": 99})


@pytest.mark.parametrize("doc", [[], "text", 3])
def test_wrong_container_is_a_clean_error(tmp_path, doc):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CorruptResult, match="not an object"):
        read_run(path)


@pytest.mark.parametrize("key, value", [("metadata", []), ("cells", "nope"), ("launches", {}),
                                        ("comparisons", 3)])
def test_wrong_container_types_are_a_clean_error(tmp_path, key, value):
    data = json.loads(SCHEMA1.read_text())
    data[key] = value
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptResult, match=f"bad field: {key} is a"):
        read_run(path)


def test_a_directory_where_a_cell_should_be(tmp_path):
    (tmp_path / "cell.json").mkdir()
    with pytest.raises(CorruptResult, match="is a directory"):
        read_cell(tmp_path / "cell.json")


def test_edited_cell_is_refused(tmp_path):
    cell = read_run(SCHEMA1).cells[0]
    path = tmp_path / "cell.json"
    write_cell(path, cell)
    data = json.loads(path.read_text())
    data["reason"] = "edited"
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptResult, match="digest"):
        read_cell(path)


@pytest.mark.parametrize("codec", ["gz", "xz"])
def test_a_compressed_run_reads_as_the_plain_one(tmp_path, codec):
    import gzip
    import lzma
    compress = {"gz": gzip.compress, "xz": lzma.compress}[codec]
    plain = DATA / "h200-pools.json"
    packed = tmp_path / f"results.json.{codec}"
    packed.write_bytes(compress(plain.read_bytes()))
    assert read_run(tmp_path).to_dict() == read_run(plain).to_dict()
    packed.write_bytes(compress(plain.read_bytes())[:500])
    with pytest.raises(CorruptResult, match=rf"results.json.{codec}: corrupt results file \({'gzip' if codec == 'gz' else 'xz'}"):
        read_run(tmp_path)



def schema2(tmp_path) -> dict:
    """revision-kl.json as schema 2 wrote it: no reproducer, every number 2."""
    raw = json.loads((DATA / "revision-kl.json").read_text())
    raw["comparisons"] = [{k: v for k, v in c.items() if k != "reproducer"} for c in raw["comparisons"]]
    return {**raw, "schema": 2, "cells": [{**c, "schema": 2} for c in raw["cells"]]}


def test_schema2_run_reads_at_the_current_schema_without_reproducers(tmp_path):
    atomic_write_json(tmp_path / "results.json", schema2(tmp_path))
    run = read_run(tmp_path)
    assert run.schema == SCHEMA_VERSION == 4 and all(c.schema == 4 for c in run.cells)
    assert [c.verdict.value for c in run.comparisons] == ["same", "different"]
    assert all(c.reproducer is None for c in run.comparisons)
    assert read_run(DATA / "revision-kl.json").comparisons[1].reproducer is not None


def test_a_stored_schema2_cell_keeps_its_digest_across_the_step(tmp_path):
    old = schema2(tmp_path)["cells"][0]
    path = tmp_path / "cell.json"
    from harness.result_files import content_digest
    atomic_write_json(path, {**old, "digest": content_digest(old)})
    assert read_cell(path).schema == 4 and read_cell(path).samples == tuple(old["samples"])


def test_a_schema3_run_reads_as_lacking_a_plan_and_is_never_a_pass(tmp_path):
    """Schema 4 records the plan; a file from before has none: it renders (its judging
    parameters still read from where schema 3 kept them), and what it set out to measure is
    unknown, which `completeness.gaps` says: no pass."""
    from harness.completeness import gaps
    raw = json.loads((DATA / "revision-kl.json").read_text())
    assert raw["schema"] == 3 and "plan" not in raw
    run = read_run(DATA / "revision-kl.json")
    assert run.schema == 4 and run.plan is None
    assert run.judging_params() == raw["metadata"].get("probe_params")
    assert gaps(run) and "records no plan" in gaps(run)[0]


def test_a_plan_round_trips_and_a_damaged_one_is_named(tmp_path):
    from harness.results import Role, RunPlan
    run = read_run(DATA / "revision-kl.json")
    plan = RunPlan("abc", (("c", "kl", Role.BASE), ("c", "kl", Role.CANDIDATE)), {"kl": {"alpha": 0.05}}, True)
    data = dataclasses.replace(run, plan=plan).to_dict()
    assert RunResult.from_dict(data).plan == plan
    atomic_write_json(tmp_path / "results.json", {**data, "plan": {**data["plan"], "complete": "yes"}})
    with pytest.raises(CorruptResult, match=r"bad field: plan.complete is a str"):
        read_run(tmp_path)
