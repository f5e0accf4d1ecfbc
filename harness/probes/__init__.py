"""Probe registry: one module per probe, each exposing PROBE = ProbeKind(...)."""

from __future__ import annotations

from harness.probes.base import ProbeContext, ProbeKind
from harness.probes import accept_length, cache_hit, determinism, kl, swa_peak, throughput

PROBES: dict[str, ProbeKind] = {
    p.name: p
    for p in (kl.PROBE, cache_hit.PREFILL_PROBE, cache_hit.DECODE_PROBE, determinism.PROBE,
              swa_peak.PROBE, accept_length.PROBE, throughput.PROBE)
}


def known_probes() -> frozenset[str]:
    return frozenset(PROBES)


__all__ = ["PROBES", "ProbeContext", "ProbeKind", "known_probes"]
