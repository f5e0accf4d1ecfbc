"""The store key names every argument that reaches the server, including a probe's flags."""

from __future__ import annotations

from types import SimpleNamespace

from conftest import refserver_suite
from harness.plan import load_suite
from harness.probes import PROBES, known_probes
from harness.results import Role
from harness.run import Run, plan


def keys(tmp_path, probes: list[str]) -> dict:
    suite = load_suite(refserver_suite(tmp_path / f"{'-'.join(probes)}.toml", probes), known_probes())
    req = SimpleNamespace(target="refserver", only_configs=(), only_probes=(), extra_args=(), extra_env={},
                          workload_scale=1,
                          revision=lambda role: SimpleNamespace(sha="a" * 40))
    (cp,) = plan(suite, req)
    run = SimpleNamespace(req=req, targets={Role.BASE: SimpleNamespace(name="refserver", python="python3")},
                          suite=suite)
    return {p: Run.key(run, cp, p, Role.BASE) for p in cp.probes}, cp


def test_a_probe_that_adds_server_flags_changes_the_key_of_its_neighbours(tmp_path):
    assert PROBES["swa_peak"].server_args  # it adds log and metrics flags to the server
    alone, cp_alone = keys(tmp_path, ["throughput"])
    shared, cp_shared = keys(tmp_path, ["throughput", "swa_peak"])
    assert cp_alone.probe_args == () and cp_shared.probe_args == PROBES["swa_peak"].server_args
    assert alone["throughput"] != shared["throughput"]
    assert alone["throughput"].server_args_fingerprint != shared["throughput"].server_args_fingerprint
    assert alone["throughput"].relpath() != shared["throughput"].relpath()
