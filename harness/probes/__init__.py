"""Probe registry, the one list of probes: every module of this package is imported and each
registers its ProbeKind (harness.probes.base.register), so a new probe is one new file; a probe
outside the tree is named by an entry point of the group `detcheck.probes` (its package's
`[project.entry-points."detcheck.probes"]`, `name = "module:PROBE"`), loaded the same way."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
from types import MappingProxyType
from typing import Iterable, Mapping

from harness.errors import UsageError
from harness.probes.base import PROBES, ProbeContext, ProbeKind, register

ENTRY_POINT_GROUP = "detcheck.probes"

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def load_entry_points(entry_points: Iterable[importlib.metadata.EntryPoint]) -> None:
    """Register the ProbeKind each entry point names; UsageError naming the entry point where
    one fails to import or names something else."""
    for entry in entry_points:
        where = f"probe entry point {entry.name} = {entry.value!r} (group {ENTRY_POINT_GROUP})"
        try:
            loaded = entry.load()
        except Exception as exc:  # whatever the plug-in raises, the user must learn which one it is
            raise UsageError(f"{where} failed to import: {type(exc).__name__}: {exc}") from exc
        if not isinstance(loaded, ProbeKind):
            raise UsageError(f"{where} names a {type(loaded).__name__}, not a ProbeKind")
        register(loaded)


load_entry_points(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def known_probes() -> Mapping[str, ProbeKind]:
    """The registered probes by name, read-only (what load_suite validates against)."""
    return MappingProxyType(PROBES)


def shipped_probes() -> Mapping[str, ProbeKind]:
    """The probes of this package's own modules (the docs' probe table lists these), by name."""
    return MappingProxyType({name: kind for name, kind in PROBES.items()
                             if kind.run.__module__.startswith(f"{__name__}.")})


__all__ = ["ENTRY_POINT_GROUP", "PROBES", "ProbeContext", "ProbeKind", "known_probes", "load_entry_points",
           "register", "shipped_probes"]
