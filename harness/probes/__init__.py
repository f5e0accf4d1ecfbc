"""Probe registry, the one list of probes: every module of this package is imported and each
registers its ProbeKind (harness.probes.base.register), so a new probe is one new file; a probe
outside the tree is named by an entry point of the group `detcheck.probes` (its package's
`[project.entry-points."detcheck.probes"]`, `name = "module:PROBE"`), loaded the same way.

The entry points load on the registry's first use (`PROBES`, `known_probes()`), not at import:
every command imports this package, and a broken plug-in must stop only what needs the registry,
with the UsageError naming it that the CLI prints as one line (exit 2), never `detcheck --help`
or a traceback from the CLI's imports."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import threading
from types import MappingProxyType
from typing import Iterable, Iterator, Mapping, MutableMapping

from harness.errors import UsageError
from harness.probes import base
from harness.probes.base import ProbeContext, ProbeKind, register

ENTRY_POINT_GROUP = "detcheck.probes"

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def load_entry_points(entry_points: Iterable[importlib.metadata.EntryPoint]) -> None:
    """Register the ProbeKind each entry point names; UsageError naming the entry point (and its
    distribution) where one fails to import, names something else or a probe's name again."""
    for entry in entry_points:
        dist = getattr(entry, "dist", None)  # None for an EntryPoint made by hand
        of = f" of {dist.name} {dist.version}" if dist is not None else ""
        where = f"probe entry point {entry.name} = {entry.value!r}{of} (group {ENTRY_POINT_GROUP})"
        try:
            loaded = entry.load()
        except Exception as exc:  # whatever the plug-in raises, the user must learn which one it is
            raise UsageError(f"{where} failed to import: {type(exc).__name__}: {exc}") from exc
        if not isinstance(loaded, ProbeKind):
            raise UsageError(f"{where} names a {type(loaded).__name__}, not a ProbeKind")
        try:
            register(loaded)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from exc


_entry_points_loaded = False
_loading = threading.Lock()  # the registry's first use may come from several worker threads at once


def _registry() -> dict[str, ProbeKind]:
    """base.PROBES with the entry points loaded; a failed load raises again on the next use."""
    global _entry_points_loaded
    with _loading:
        if not _entry_points_loaded:
            load_entry_points(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
            _entry_points_loaded = True
    return base.PROBES


class _Registry(MutableMapping[str, ProbeKind]):
    """`PROBES`: base.PROBES, its entry points loaded on first use (writable, as that dict is,
    for a test's monkeypatch)."""

    def __getitem__(self, name: str) -> ProbeKind:
        return _registry()[name]

    def __setitem__(self, name: str, kind: ProbeKind) -> None:
        _registry()[name] = kind

    def __delitem__(self, name: str) -> None:
        del _registry()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_registry())

    def __len__(self) -> int:
        return len(_registry())


PROBES: MutableMapping[str, ProbeKind] = _Registry()


def known_probes() -> Mapping[str, ProbeKind]:
    """The registered probes by name, read-only (what load_suite validates against)."""
    return MappingProxyType(_registry())


def shipped_probes() -> Mapping[str, ProbeKind]:
    """The probes of this package's own modules (the docs' probe table lists these), by name."""
    return MappingProxyType({name: kind for name, kind in _registry().items()
                             if kind.run.__module__.startswith(f"{__name__}.")})


__all__ = ["ENTRY_POINT_GROUP", "PROBES", "ProbeContext", "ProbeKind", "known_probes", "load_entry_points",
           "register", "shipped_probes"]
