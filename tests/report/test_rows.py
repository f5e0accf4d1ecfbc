"""Row notes: which models ran on dummy weights, read from a stored H200 run's server argv."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.report.rows import dummy_weights_text
from harness.result_files import read_run

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
