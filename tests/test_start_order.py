"""The pool's start order without servers: longest first from earlier runs' records, and one
server per model before the model's others."""

from __future__ import annotations

import json
import threading

import pytest

from conftest import ROOT, detcheck
from harness.errors import UsageError
from harness.result_files import read_json
from harness.results import Role
from harness.pipeline.slots import SlotPool, Unit, cpu_slots
from harness.pipeline.start_order import JobTimes, ModelGates, longest_first, read_job_times

BASE, CAND = Role.BASE, Role.CANDIDATE
POOL_RUN = ROOT / "results/h200/validate-pool"  # the committed H200 pool run: three suites


def test_longest_first_puts_untimed_units_first_then_the_longest_and_keeps_ties_in_order():
    assert longest_first(list("abcdef"), [10.0, None, 30.0, 10.0, None, 20.0]) == list("becfad")
    assert longest_first(list("abc"), [None, None, None]) == list("abc")  # no times: the plan's order


def test_job_times_are_read_from_every_suite_of_a_matrix_runs_folder():
    times = read_job_times([POOL_RUN])
    assert len(times.sources) == 3
    raw = read_json(POOL_RUN / "release-pools/results.json.xz")
    launch = next(l for l in raw["launches"] if l["config"] == "static-graphs-on" and l["role"] == "base")
    seconds = launch["ended_at"] - launch["started_at"]
    assert times.seconds[(raw["suite"], "static-graphs-on", "base")] == pytest.approx(seconds)
    # An interleaved unit lasts as long as its longer job; a configuration no run timed: None.
    cand = times.seconds[(raw["suite"], "static-graphs-on", "candidate")]
    assert times.expected(raw["suite"], "static-graphs-on", (BASE, CAND)) == max(seconds, cand)
    assert times.expected(raw["suite"], "no-such-config", (BASE,)) is None


def test_a_path_without_results_is_bad_input(tmp_path):
    with pytest.raises(UsageError, match="no results.json"):
        read_job_times([tmp_path])


@pytest.mark.parametrize("started_at, ended_at", [("yesterday", 2.0), (1.0, [1, 2]), (True, 2.0)])
def test_launch_times_that_are_not_numbers_are_a_damaged_file_exit_2(tmp_path, started_at, ended_at):
    """`--order-from` (and a matrix entry's `order_from`) subtracts the times: a string or a
    list there was a TypeError traceback."""
    data = json.loads((ROOT / "tests/data/demo-cache.json").read_text())
    data["launches"][0].update(started_at=started_at, ended_at=ended_at)
    (tmp_path / "results.json").write_text(json.dumps(data))
    proc = detcheck("run", "--suite", str(ROOT / "suites/default.toml"), "--order-from", str(tmp_path),
                    "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{tmp_path / 'results.json'}: corrupt results file (bad field: launch " in proc.stderr, proc.stderr
    assert "expected Unix seconds (a number)" in proc.stderr


def test_a_models_first_job_starts_at_once_and_its_others_once_it_is_opened():
    gates = ModelGates(["qwen", "qwen", "llama", "qwen", "llama"])
    assert gates.models == 2
    assert [gates.may_start(i, m) for i, m in enumerate(["qwen", "qwen", "llama", "qwen", "llama"])] == \
        [True, False, True, False, False]
    gates.opened("qwen")
    assert gates.may_start(1, "qwen") and gates.may_start(3, "qwen") and not gates.may_start(4, "llama")


def test_the_pool_passes_over_a_gated_unit_and_the_first_that_may_start_is_overtaken_by_none():
    pool = SlotPool(cpu_slots(2))
    gated, pair, single = Unit(0, (BASE,)), Unit(1, (BASE, CAND)), Unit(2, (CAND,))
    waiting = [gated, pair, single]
    allowed = {pair, single}
    taken, slots = pool.acquire_next(waiting, lambda u: u in allowed)
    assert taken is pair and sorted(slots) == [0, 1] and waiting == [gated, single]
    got: list[Unit] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire_next(waiting, lambda u: u in allowed)[0]))
    waiter.start()
    waiter.join(timeout=0.5)
    assert not got  # no slot free
    allowed.add(gated)  # the gate opens while it waits: the gated unit is first again
    pool.release(slots)
    waiter.join(timeout=5)
    assert got == [gated] and waiting == [single]


def test_job_times_without_sources_change_nothing():
    assert JobTimes().expected("s", "c", (BASE,)) is None
