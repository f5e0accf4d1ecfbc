"""The store key names every argument that reaches the server, including a probe's flags."""

from __future__ import annotations

from types import SimpleNamespace

from conftest import refserver_suite
from harness.suite import load_suite
from harness.probes import PROBES, known_probes
from harness.results import Role
from harness.pipeline.open import Run
from harness.pipeline.plan import plan


def keys(tmp_path, probes: list[str], role: Role = Role.BASE, role_env: dict | None = None,
         tables: str = "") -> dict:
    name = f"{'-'.join(probes)}-{abs(hash(tables))}.toml"
    suite = load_suite(refserver_suite(tmp_path / name, probes, tables), known_probes())
    req = SimpleNamespace(target="refserver", only_configs=(), only_probes=(), extra_args=(), extra_env={},
                          workload_scale=1, role_env=role_env or {},
                          revision=lambda role: SimpleNamespace(sha="a" * 40))
    (cp,) = plan(suite, req)
    interpreter = SimpleNamespace(name="refserver", python="python3")
    run = SimpleNamespace(req=req, targets={Role.BASE: interpreter, Role.CANDIDATE: interpreter}, suite=suite)
    return {p: Run.key(run, cp, p, role) for p in cp.probes}, cp


def test_a_probe_that_adds_server_flags_changes_the_key_of_its_neighbours(tmp_path):
    assert PROBES["swa_peak"].server_args  # it adds log and metrics flags to the server
    alone, cp_alone = keys(tmp_path, ["throughput"])
    shared, cp_shared = keys(tmp_path, ["throughput", "swa_peak"])
    assert cp_alone.probe_args == () and cp_shared.probe_args == PROBES["swa_peak"].server_args
    assert alone["throughput"] != shared["throughput"]
    assert alone["throughput"].server_args_fingerprint != shared["throughput"].server_args_fingerprint
    assert alone["throughput"].relpath() != shared["throughput"].relpath()


def test_a_sides_own_environment_and_a_demanded_path_proof_are_in_its_keys(tmp_path):
    """selftest's candidate (SGLANG_DEBUG_REVERT_PR) never reuses the base's cells of the same sha,
    and a graphs-on configuration's cells (which carry the path proof) none measured without it."""
    base, _ = keys(tmp_path, ["kl"])
    plain, _ = keys(tmp_path, ["kl"], Role.CANDIDATE)
    reverted, _ = keys(tmp_path, ["kl"], Role.CANDIDATE, {Role.CANDIDATE: {"SGLANG_DEBUG_REVERT_PR": "9001"}})
    assert base["kl"] == plain["kl"] and reverted["kl"] != plain["kl"]
    graphs, _ = keys(tmp_path, ["kl"], tables="cuda_graph = true\n")
    assert graphs["kl"].server_args_fingerprint != base["kl"].server_args_fingerprint
