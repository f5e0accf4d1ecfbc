"""Server slots without servers: which units take which slots, in which order, and how a
matrix entry or the CLI turns into slots."""

from __future__ import annotations

import argparse
import io
import threading
import time

import pytest
from rich.console import Console

from harness.commands.common_args import slot_count
from harness.errors import UsageError
from harness.matrix import MatrixEntry
from harness.report.console import ConsoleObserver
from harness.results import CellResult, RevisionInfo, Role, Status
from harness.pipeline.slots import Countdown, Slot, SlotPool, Unit, cpu_slots, default_slot_count, entry_slots

BASE, CAND = Role.BASE, Role.CANDIDATE


def take(pool: SlotPool, roles: tuple[Role, ...]) -> tuple[int, ...]:
    """The slots of one unit that may start, once they are free."""
    return pool.acquire_next([Unit(0, roles)], lambda unit: True)[1]


def test_units_take_free_slots_and_wait_for_them_in_order():
    pool = SlotPool(cpu_slots(2))
    first, second = take(pool, (BASE,)), take(pool, (CAND,))
    assert sorted(first + second) == [0, 1]
    got: list[tuple[int, ...]] = []
    waiter = threading.Thread(target=lambda: got.append(take(pool, (BASE, CAND))))
    waiter.start()
    time.sleep(0.3)
    assert not got  # an interleaved unit needs both slots at once
    pool.release(first)
    time.sleep(0.3)
    assert not got
    pool.release(second)
    waiter.join(timeout=5)
    assert sorted(got[0]) == [0, 1]


def test_an_interleaved_unit_at_one_slot_takes_the_whole_pool_and_its_servers_share_it():
    pool = SlotPool(cpu_slots(1))
    assert take(pool, (BASE, CAND)) == (0, 0)
    pool.release((0, 0))
    assert take(pool, (CAND,)) == (0,)


def test_a_role_bound_slot_serves_only_its_role():
    pool = SlotPool((Slot({"CUDA_VISIBLE_DEVICES": "0"}, BASE), Slot({"CUDA_VISIBLE_DEVICES": "1"}, CAND)))
    assert take(pool, (CAND,)) == (1,)
    assert take(pool, (BASE,)) == (0,)
    pool.release((0,))
    assert pool._pick((CAND,)) is None  # the base's GPU stays the base's
    assert pool._pick((BASE,)) == (0,)


def test_countdown_says_when_a_configurations_last_unit_ends():
    countdown = Countdown([Unit(0, (BASE,)), Unit(0, (CAND,)), Unit(1, (CAND, BASE))])
    assert countdown.finished(0) is False
    assert countdown.finished(1) is True
    assert not countdown.all_finished()
    assert countdown.finished(0) is True
    assert countdown.all_finished()


def entry(gpus: int, servers_per_gpu: int | None = None, target: str = "sglang") -> MatrixEntry:
    return MatrixEntry("e", "H200" if gpus else "", gpus, (), target=target, servers_per_gpu=servers_per_gpu)


def test_servers_per_gpu_gives_each_slot_one_gpu_spread_over_the_cards():
    slots = entry_slots(entry(2, servers_per_gpu=3), visible="4,5")
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in slots] == ["4", "5", "4", "5", "4", "5"]
    assert all(s.role is None for s in slots)


def test_servers_per_gpu_given_for_a_run_replaces_the_entrys():
    assert len(entry_slots(entry(1, servers_per_gpu=48), visible=None, servers_per_gpu=24)) == 24
    assert len(entry_slots(entry(2), visible=None, servers_per_gpu=3)) == 6  # no longer one side per half
    for bad in (entry(0, target="refserver"), entry(1)):
        with pytest.raises(UsageError, match="needs an entry with GPUs and a count from 1 to 64"):
            entry_slots(bad, visible=None, servers_per_gpu=2 if bad.gpus == 0 else 65)


def test_an_entry_without_servers_per_gpu_keeps_one_side_per_half_or_one_gpu():
    pair = entry_slots(entry(2), visible=None)
    assert [(s.role, s.env["CUDA_VISIBLE_DEVICES"]) for s in pair] == [(BASE, "0"), (CAND, "1")]
    assert entry_slots(entry(1), visible=None) == (Slot({"CUDA_VISIBLE_DEVICES": "0"}),)
    assert len(entry_slots(entry(0, target="refserver"), visible=None)) == default_slot_count("refserver")


def test_slot_count_from_the_command_line():
    def args(**kw) -> argparse.Namespace:
        return argparse.Namespace(**{"slots": None, "parallel": False, **kw})

    assert slot_count(args(), "sglang") == 2
    assert slot_count(args(slots=1), "sglang") == 1
    assert slot_count(args(slots=1, parallel=True), "sglang") == 2  # --parallel: base and candidate at once
    assert slot_count(args(slots=6, parallel=True), "sglang") == 6
    with pytest.raises(UsageError, match="--slots 0"):
        slot_count(args(slots=0), "sglang")


def test_progress_keeps_one_line_per_running_job():
    observer = ConsoleObserver(Console(file=io.StringIO(), force_terminal=False))
    observer.begin(8)
    observer.launching("a", "base", "main")(1.0)
    observer.launching("b", "candidate", "HEAD")(2.0)
    observer.probing("a", "base", "kl")(1, 2)
    lines = [t.description for t in observer.progress.tasks]
    assert lines == ["cells", "  kl a @ base", "  launch b @ candidate (HEAD) 2s"]
    observer.job_done("a", "base")
    assert [t.description for t in observer.progress.tasks] == ["cells", "  launch b @ candidate (HEAD) 2s"]
    observer.end()
    assert [t.description for t in observer.progress.tasks] == ["cells"]


def test_a_reason_every_probe_of_a_job_shares_is_said_once_and_unwrapped():
    """Before: a failed launch was printed once per probe, wrapped at 80 columns."""
    out = io.StringIO()
    observer = ConsoleObserver(Console(file=out, force_terminal=False, width=80))
    reason = "launch failed: server exited with code 1 before becoming healthy: " + "ModuleNotFoundError " * 4
    for probe in ("kl", "prefill_cache_hit", "decode_cache_hit"):
        observer.cell_done(CellResult(config="det", probe=probe, role=Role.BASE, revision=RevisionInfo("main", None),
                                      status=Status.ERROR, config_fingerprint="c", workload_fingerprint="w",
                                      reason=reason), reused=False)
    assert out.getvalue() == f"det/kl @ base: error: {reason[:200]}\n"
