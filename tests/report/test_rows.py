"""Row notes: which models ran on dummy weights (read from a stored H200 run's server argv),
comparisons in words, side notes, paths a pasted report may show."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.report.format import portable, portable_path
from harness.report.rows import (comparison_text, dummy_weights_text, ratio_text, value_place,
                                 without_shared_side_notes)
from harness.result_files import read_run
from harness.results import CellResult, Metric, RevisionInfo, Role, Status
from harness.stats import Floor, Kind, compare_exact, compare_noisy

RUN = read_run(Path(__file__).resolve().parents[1] / "data" / "h200-pools.json")


def with_argv(argv: list[str]):
    cell = RUN.cells[0]
    return dataclasses.replace(cell, metadata={**cell.metadata, "server_argv": argv})


def test_the_stored_run_used_dummy_target_weights():
    assert dummy_weights_text(RUN.cells[0], RUN.cells[1]) == "dummy weights: target"


def test_a_draft_inherits_the_target_format_unless_its_own_is_given():
    draft = ["--speculative-draft-model-path", "/m/draft"]
    assert dummy_weights_text(with_argv(["--load-format", "dummy", *draft]), None) \
        == "dummy weights: target and draft"
    assert dummy_weights_text(with_argv([*draft, "--speculative-draft-load-format", "dummy"]), None) \
        == "dummy weights: draft"
    assert dummy_weights_text(with_argv(["--load-format", "dummy", *draft,
                                         "--speculative-draft-load-format", "auto"]), None) \
        == "dummy weights: target"
    assert dummy_weights_text(with_argv(draft), with_argv([])) == ""


def test_a_rate_reads_as_a_ratio_with_its_interval():
    base = Metric("tok_s_c4", Kind.NOISY, (100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.1), "tok/s", "higher")
    faster = tuple(v * 1.27 for v in base.values)
    c = compare_noisy(base.values, faster, Floor(relative=0.05))
    text = comparison_text(c, base, dataclasses.replace(base, values=faster))
    assert text.startswith("1.27× faster (95% CI 1.2") and "Δ median" in text, text
    slower = compare_noisy(faster, base.values, Floor(relative=0.05))
    assert ratio_text(slower, dataclasses.replace(base, values=faster)).startswith("1.27× slower")
    plain = dataclasses.replace(base, unit="")
    assert ratio_text(c, plain).startswith("1.27× higher")
    zero = compare_noisy((0.0,) * 8, faster, Floor(relative=0.05))
    assert ratio_text(zero, base) == ""  # no ratio to a median of 0


def test_exact_differences_read_in_words_and_singulars_hold():
    one = Metric("hit_fraction", Kind.EXACT, (1.0,), headline="first")
    assert comparison_text(compare_exact((1.0,), (1.0,)), one, one) == "identical (1 value)"
    base = Metric("k3", Kind.EXACT, (0.0, 0.0, 0.0), headline="mean")
    cand = dataclasses.replace(base, values=(0.0, 0.006593097613568202, 0.0))
    assert (comparison_text(compare_exact(base.values, cand.values), base, cand, item="prompt")
            == "mean 0 → 0.0022; first at prompt 1: 0 → 0.00659 (1 of 3 prompts differ)")


def k3_cell(role: Role, firsts: tuple[int | None, ...]) -> CellResult:
    """A kl cell whose per-prompt samples say where each answer first departed from its replay."""
    return CellResult(config="det", probe="kl", role=role, revision=RevisionInfo("main", "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                      samples=tuple({"k3": 0.0, "first_divergent": f} for f in firsts))


def test_a_differing_prompt_names_the_output_position_where_it_departed():
    base = Metric("k3", Kind.EXACT, (0.0, 0.0, 0.0), headline="mean")
    cand = dataclasses.replace(base, values=(0.0, 0.006593097613568202, 0.0))
    cells = (k3_cell(Role.BASE, (None, None, None)), k3_cell(Role.CANDIDATE, (None, 3, None)))
    where = value_place("prompt", cells, (base, cand))
    assert (comparison_text(compare_exact(base.values, cand.values), base, cand, item="prompt", where=where)
            == "mean 0 → 0.0022; first at prompt 1, output position 3: 0 → 0.00659 (1 of 3 prompts differ)")
    both = (k3_cell(Role.BASE, (5, 2, 4)), k3_cell(Role.CANDIDATE, (5, 7, None)))
    assert [value_place("prompt", both, (base, cand))(i) for i in range(3)] == [
        "prompt 0, output position 5", "prompt 1, output position 2 → 7", "prompt 2, output position 4"]
    # No position without samples one per value, nor for values that are not prompts.
    assert value_place("prompt", (cells[0], None), (base, None))(1) == "prompt 1"
    assert value_place("prompt", cells, (base, dataclasses.replace(cand, values=(0.0,))))(1) == "prompt 1"
    assert value_place("value", cells, (base, cand))(1) == "value 1"


def test_side_notes_both_sides_share_are_left_out_and_the_headline_stays():
    assert without_shared_side_notes("k3 0; gate < 1.00e-09 ✗", "k3 0; gate < 1.00e-09 ✗") == ("k3 0", "k3 0")
    assert without_shared_side_notes("k3 0; gate < 1.00e-09 ✓", "k3 1; gate < 1.00e-09 ✗") == (
        "k3 0; gate < 1.00e-09 ✓", "k3 1; gate < 1.00e-09 ✗")


def test_paths_read_as_the_projects_or_the_revisions_and_never_the_machines(tmp_path):
    (tmp_path / "fixtures" / "refmodels" / "hybrid").mkdir(parents=True)
    assert portable_path("/elsewhere/checkout/fixtures/refmodels/hybrid", tmp_path) == "fixtures/refmodels/hybrid"
    assert portable_path("/tmp/x/detcheck-cache/worktrees/sglang-1a2b/88468dbefa4b/python/sglang/srt/a.py",
                         tmp_path) == "88468dbefa4b:python/sglang/srt/a.py"
    assert portable_path("/data/models/Qwen3-8B", tmp_path) == "…/models/Qwen3-8B"
    assert portable_path("/scratch", tmp_path) == "…/scratch"
    assert portable("--model-path /data/models/Qwen3-8B --out=/tmp/a/run x/y", tmp_path) == \
        "--model-path …/models/Qwen3-8B --out=…/a/run x/y"
