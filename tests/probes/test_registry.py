"""The registry: every module of harness.probes registers itself; a probe from a module of its
own (one file, outside the package) registers the same way and runs end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, refserver_suite
from harness.errors import UsageError
from harness.probes import PROBES, known_probes, register
from harness.probes.base import ProbeKind


def test_every_probe_module_registers_its_probes():
    assert set(PROBES) == {"kl", "prefill_cache_hit", "decode_cache_hit", "determinism", "swa_peak",
                           "accept_length", "throughput", "revision_kl"}
    assert set(known_probes()) == set(PROBES)
    with pytest.raises(TypeError):
        known_probes()["x"] = PROBES["kl"]  # read-only view


def test_a_second_probe_of_the_same_name_is_refused():
    clash = ProbeKind("kl", lambda ctx: None, "another kl")
    with pytest.raises(UsageError, match="two probes are named 'kl'"):
        register(clash)
    assert register(PROBES["kl"]) is PROBES["kl"]  # registering the same one again is harmless


TOY = '''
"""toy: completion tokens per prompt, with one parameter of each role."""

from harness.params import Param, ParamRole
from harness.probes import register
from harness.probes.base import ProbeKind
from harness.probes.shared_params import JUDGING, WORKLOAD
from harness.results import Metric, ProbeOutput
from harness.stats import Kind


def run(ctx):
    gens = ctx.client.generate([list(p) for p in ctx.workload.prompts],
                               max_new_tokens=ctx.param("tokens"))
    counts = tuple(float(g.completion_tokens) for g in gens)
    return ProbeOutput(samples=tuple({"completion_tokens": c} for c in counts),
                       metrics=(Metric("completion_tokens", Kind.EXACT, counts),),
                       facts={"requests": len(gens)})


PROBE = register(ProbeKind("toy", run, "completion tokens per prompt", params=(
    *WORKLOAD,
    Param("tokens", int, 3, "tokens per request", ParamRole.MEASURED, low=1, high=64),
    *JUDGING,
), describe=lambda facts, primary: f"{facts['requests']} requests"))
'''


def detcheck_with_toy(module_dir, *args: str) -> subprocess.CompletedProcess:
    """`detcheck` as a user's own entry point would run it: import the probe's module, then the CLI."""
    code = "import sys, toy_probe; from harness.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "PYTHONPATH": f"{module_dir}:{ROOT}"})


@pytest.mark.slow
def test_a_toy_probe_in_a_module_of_its_own_runs_end_to_end(tmp_path):
    (tmp_path / "toy_probe.py").write_text(TOY)
    suite = refserver_suite(tmp_path / "toy.toml", ["toy"], "[probe.toy]\ntokens = 5\n", config="plain",
                            deterministic=False, prompt_len=(8, 8))
    out = tmp_path / "run"
    proc = detcheck_with_toy(tmp_path, "run", "--suite", str(suite), "--out", str(out),
                             "--no-progress", "--format", "md")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert [c["verdict"] for c in result["comparisons"]] == ["same"]
    cell = next(c for c in result["cells"] if c["role"] == "base")
    assert cell["status"] == "ok" and [s["completion_tokens"] for s in cell["samples"]] == [5, 5]
    assert "| plain | `toy` | 2 requests | 2 requests | ✅ same |" in proc.stdout

    suite.write_text(suite.read_text().replace("tokens = 5", "tokens = 500"))
    bad = detcheck_with_toy(tmp_path, "run", "--suite", str(suite), "--out", str(tmp_path / "bad-run"))
    assert bad.returncode == 2 and "[probe.toy].tokens: 500 is out of range [1, 64]" in bad.stderr
