"""A broken probe plug-in: it imports, but its ProbeKind takes the name of a shipped probe, `kl`
(tests/probes/test_registry.py checks that the refusal names the plug-in)."""

from harness.probes.base import ProbeKind

PROBE = ProbeKind("kl", lambda ctx: None, "a second kl")
