"""Server slots: how many servers of a run may be up at once, and which job gets which.

A run's jobs (configuration × revision) are grouped into `Unit`s: one job, or both jobs of a
configuration whose probes interleave (both servers must be up together). Units start in the
pool's order (harness.pipeline.start_order: the plan's, or longest first), each as soon as its slots are
free (`SlotPool.acquire_next`), so with N slots up to N servers launch, probe and stop at once;
with one slot the run is today's sequential one.

A `Slot` carries the environment that pins its server (CUDA_VISIBLE_DEVICES: a fixed set of
GPUs per server, `MatrixEntry.device_groups`) and, for a role-bound slot, the role it serves.
A matrix entry's slots (`entry_slots`): its GPUs in groups as wide as one server
(`configs.gpus_per_server`, the widest configuration: `suite_gpus_per_server`), each group
servers_per_gpu slots or one. Where two slots fit, base and candidate run side by side; where
only one does and its server spans several GPUs (an exclusive slot), they run in turn: a
configuration that would have both servers up together (an interleaved noisy probe, a
sequential one) runs as two jobs one after the other instead (`side_by_side`), its noisy cells
marked `placement: in turn` (no round-by-round alternation between the sides).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, TypeVar

from harness.configs import gpus_per_server
from harness.errors import UsageError
from harness.matrix import MAX_SERVERS_PER_GPU, MatrixEntry, valid_servers_per_gpu
from harness.suite import Suite
from harness.results import Role

# Servers a run may have up at once: far more than any host holds (a server is a process with
# its own memory), and few enough that the slots are cheap to lay out.
MAX_SLOTS = 256

# How long the main thread waits on the pool between looks: short, so a signal handler (Ctrl-C,
# SIGTERM) runs promptly while it waits.
_WAIT_S = 0.2


@dataclass(frozen=True)
class Slot:
    """Room for one server."""

    env: dict[str, str] = field(default_factory=dict)  # e.g. CUDA_VISIBLE_DEVICES
    role: Role | None = None  # a slot of one role's GPUs serves that role only
    # Holds one server at a time: the only slot of an entry whose servers span several GPUs
    # (two of them would not fit). A shared one (a CPU slot, one GPU) takes both servers of a
    # configuration when it is the run's only slot.
    exclusive: bool = False

    def serves(self, role: Role) -> bool:
        return self.role is None or self.role == role

    @property
    def devices(self) -> tuple[str, ...]:
        """The GPUs its server sees (CUDA_VISIBLE_DEVICES), none for a CPU slot."""
        visible = self.env.get("CUDA_VISIBLE_DEVICES", "")
        return tuple(d for d in visible.split(",") if d)


def side_by_side(slots: tuple[Slot, ...]) -> bool:
    """Whether a configuration's two servers can be up at once: two slots, or one shared."""
    return len(slots) >= 2 or not slots[0].exclusive


@dataclass(frozen=True)
class Unit:
    """Jobs that take their slots together: one job, or both of an interleaved configuration."""

    config_index: int  # into the run's plans
    roles: tuple[Role, ...]


class Waiting(Protocol):
    @property
    def roles(self) -> tuple[Role, ...]: ...


U = TypeVar("U", bound=Waiting)


def check_slot_count(count: int) -> int:
    """`count` if it is a number of servers a run can have up at once, else UsageError."""
    if not 1 <= count <= MAX_SLOTS:
        raise UsageError(f"--slots {count}: must be between 1 and {MAX_SLOTS}")
    return count


def cpu_slots(count: int) -> tuple[Slot, ...]:
    return tuple(Slot() for _ in range(max(1, count)))


def default_slot_count(target: str | None) -> int:
    """The reference server is one CPU-bound process: half the cores leaves room for the harness
    and the probes' clients. SGLang without a matrix entry: the two servers of one configuration
    (as interleaving already has them), since what else fits on the GPU is not known."""
    if target == "refserver":
        return max(1, (os.cpu_count() or 1) // 2)
    return 2


def entry_slots(entry: MatrixEntry, visible: str | None, servers_per_gpu: int | None = None,
                per_server: int | None = None) -> tuple[Slot, ...]:
    """A matrix entry's slots, its GPUs grouped `per_server` wide (the entry's declared
    gpus_per_server wins; else `per_server`, read from its configurations; else 1). With
    servers_per_gpu (the entry's, or `servers_per_gpu` given for this run): that many per group,
    each pinned to its group. Without: a CPU entry gets the target's default; two groups, one
    slot per role (base and candidate side by side, each on its own GPUs); more, one slot per
    group; one group, one slot, exclusive where a server spans several GPUs (base and candidate
    in turn), shared on one GPU (in turn, or an interleaved configuration's two servers on the
    card)."""
    per_gpu = servers_per_gpu or entry.servers_per_gpu
    if servers_per_gpu is not None and not valid_servers_per_gpu(servers_per_gpu, entry.gpus):
        raise UsageError(f"--servers-per-gpu {servers_per_gpu}: needs an entry with GPUs and a count "
                         f"from 1 to {MAX_SERVERS_PER_GPU}")
    if entry.gpus == 0:
        return cpu_slots(default_slot_count(entry.target))
    width = entry.gpus_per_server or per_server or 1
    groups = entry.device_groups(width, visible)
    if per_gpu is not None:
        return gpu_slots(groups, per_gpu)
    if len(groups) == 2:
        return role_slots({Role.BASE: _pinned(groups[0]), Role.CANDIDATE: _pinned(groups[1])})
    if len(groups) > 2:
        return tuple(Slot(_pinned(group)) for group in groups)
    return (Slot(_pinned(groups[0]), exclusive=width > 1),)


def _pinned(group: str) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": group}


def suite_gpus_per_server(suites: Iterable[Suite], target: str, extra_args: tuple[str, ...] = ()) -> int:
    """GPUs per server of the suites' configurations at `target` (each with the entry's server
    args after its own): the widest, so that every one fits its slot; 1 for none."""
    return max((gpus_per_server((*suite.server_args, *suite.target_args.get(target, ()), *spec.args,
                                 *spec.target_args.get(target, ()), *extra_args), f"{suite.path}: config {spec.name!r}")
                for suite in suites for spec in suite.configs), default=1)


def gpu_slots(groups: list[str], servers_per_gpu: int) -> tuple[Slot, ...]:
    """`servers_per_gpu` slots per group of GPUs, each pinned to its group, groups taken in
    turn so that the first slots spread over the cards."""
    return tuple(Slot(_pinned(g)) for _ in range(servers_per_gpu) for g in groups)


def role_slots(role_env: dict[Role, dict[str, str]]) -> tuple[Slot, ...]:
    """One slot per role on its own GPUs (a multi-GPU entry without servers_per_gpu)."""
    return tuple(Slot(env, role) for role, env in role_env.items())


class SlotPool:
    """Thread-safe: units take slots in the order they ask, and give them back when done."""

    def __init__(self, slots: tuple[Slot, ...]):
        if not slots:
            raise ValueError("a run needs at least one server slot")
        self.slots = slots
        self._free = list(range(len(slots)))
        self._changed = threading.Condition()

    def acquire_next(self, waiting: list[U], may_start: Callable[[U], bool]) -> tuple[U, tuple[int, ...]]:
        """The first of `waiting` (each with its `roles`) that may start, and its slot indices,
        one per role, once they are free (the caller waits); it leaves `waiting`. One that may
        not start yet is passed over; the first that may waits for its slots, overtaken by none
        behind it. A unit with more servers than the run has slots (an interleaved configuration
        at --slots 1) waits for all of them and its servers share them."""
        with self._changed:
            while True:
                first = next((item for item in waiting if may_start(item)), None)
                if first is not None and (picked := self._pick(first.roles)) is not None:
                    waiting.remove(first)
                    for index in set(picked):
                        self._free.remove(index)
                    return first, picked
                self._changed.wait(_WAIT_S)

    def release(self, picked: tuple[int, ...]) -> None:
        with self._changed:
            self._free.extend(set(picked))
            self._changed.notify_all()

    def _pick(self, roles: tuple[Role, ...]) -> tuple[int, ...] | None:
        if len(roles) > len(self.slots):
            whole = len(self._free) == len(self.slots)
            return tuple(i % len(self.slots) for i in range(len(roles))) if whole else None
        picked: list[int] = []
        for role in roles:
            index = next((i for i in self._free if i not in picked and self.slots[i].serves(role)), None)
            if index is None:
                return None
            picked.append(index)
        return tuple(picked)


class Countdown:
    """Units left per configuration: the last one to finish says so, and results.json is saved."""

    def __init__(self, units: list[Unit]):
        self._left: dict[int, int] = {}
        for unit in units:
            self._left[unit.config_index] = self._left.get(unit.config_index, 0) + 1
        self._lock = threading.Lock()

    def finished(self, config_index: int) -> bool:
        with self._lock:
            self._left[config_index] -= 1
            return self._left[config_index] == 0

    def all_finished(self) -> bool:
        with self._lock:
            return not any(self._left.values())
