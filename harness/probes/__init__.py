"""Probe registry: every module of this package is imported, and each probe module registers
its ProbeKind (harness.probes.base.register), so a new probe is one new file."""

from __future__ import annotations

import importlib
import pkgutil
from types import MappingProxyType
from typing import Mapping

from harness.probes.base import PROBES, ProbeContext, ProbeKind, register

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def known_probes() -> Mapping[str, ProbeKind]:
    """The registered probes by name, read-only (what load_suite validates against)."""
    return MappingProxyType(PROBES)


__all__ = ["PROBES", "ProbeContext", "ProbeKind", "known_probes", "register"]
