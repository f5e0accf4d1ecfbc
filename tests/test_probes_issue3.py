"""swa_peak / accept_length / throughput pieces without a server: the SWA curve from log lines,
growth slope and plateau, describe strings, and the SWA plot files."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import ROOT, detcheck
from harness.probes import PROBES, accept_length, swa_peak, throughput
from harness.probes.common import swa_curve
from harness.results import CellResult, Metric, ProbeComparison, RevisionInfo, Role, RunResult, Status
from harness.report import plot
from harness.report.markdown import MarkdownReport
from harness.stats import Kind

# SGLang 0.5.16 hybrid-SWA Decode lines at --decode-log-interval 1 under DFLASH: one line per
# verify round; eviction every 4 rounds (SGLANG_SWA_EVICTION_INTERVAL=4) with a window of 8.
LOG = """\
[2026-11-30 10:00:00] Prefill batch, #new-seq: 1, #new-token: 20, #cached-token: 0, full token usage: 0.01, swa token usage: 0.05, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 410.2
[2026-11-30 10:00:00] Decode batch, #running-req: 1, #full token: 24, full token usage: 0.01, #swa token: 24, swa token usage: 0.06, accept len: 3.00, accept rate: 0.50, cuda graph: False, gen throughput (token/s): 31.0, #queue-req: 0
[2026-11-30 10:00:00] Decode batch, #running-req: 1, #full token: 26, full token usage: 0.01, #swa token: 10, swa token usage: 0.03, accept len: 2.00, accept rate: 0.25, cuda graph: False, gen throughput (token/s): 30.1, #queue-req: 0
[2026-11-30 10:00:00] Decode batch, #running-req: 1, #full token: 30, full token usage: 0.01, #swa token: 14, swa token usage: 0.04, accept len: 4.00, accept rate: 0.75, cuda graph: False, gen throughput (token/s): 33.4, #queue-req: 0
[2026-11-30 10:00:01] Decode batch, #running-req: 1, #full token: 31, full token usage: 0.01, #swa token: 15, swa token usage: 0.04, accept len: 1.00, accept rate: 0.00, cuda graph: False, gen throughput (token/s): 29.9, #queue-req: 0
[2026-11-30 10:00:01] Decode batch, #running-req: 1, #full token: 34, full token usage: 0.01, #swa token: 18, swa token usage: 0.05, accept len: 3.00, accept rate: 0.50, cuda graph: False, gen throughput (token/s): 31.2, #queue-req: 0
[2026-11-30 10:00:01 TP0] Decode batch [41], #running-req: 1, #full token: 37, full token usage: 0.01, #swa token: 11, swa token usage: 0.03, accept len: 3.00, accept rate: 0.50, cuda graph: False, gen throughput (token/s): 31.0, #queue-req: 0
INFO:     127.0.0.1:50112 - "POST /generate HTTP/1.1" 200 OK
[2026-11-30 10:00:01] Decode batch, #running-req: 1, #full token: 39, full token usage: 0.01, #swa token: 13, swa token usage: 0.03, accept len: 2.00, accept rate: 0.25, cuda graph: False, gen throughput (token/s): 30.0, #queue-req: 0
[2026-11-30 10:00:01] Decode batch, #running-req: 1, #full token: 43, full token usage: 0.01, #swa token: 17, swa token usage: 0.04, accept len: 4.00, accept rate: 0.75, cuda graph: False, gen throughput (token/s): 33.0, #queue-req: 0
"""



def plain_log(steps: int, running: int = 2) -> str:
    """Decode lines without speculative decoding or eviction: held grows with every token."""
    return "\n".join(
        f"[t] Decode batch, #running-req: {running}, #full token: {100 + running * i}, "
        f"full token usage: 0.10, #swa token: {60 + running * i}, swa token usage: 0.{20 + i:02d}, "
        f"cuda graph: False, gen throughput (token/s): 10.0, #queue-req: 0"
        for i in range(steps)
    )


PLAIN_LOG = plain_log(6)


def test_curve_from_spec_log_sums_accept_lengths():
    curve = swa_curve(LOG)
    assert curve.held == (24, 10, 14, 15, 18, 11, 13, 17)
    # the prefill's first token, then each round's accept length
    assert curve.generated == (4, 6, 10, 11, 14, 17, 19, 23)
    assert curve.usage[0] == 0.06
    assert max(curve.held) == 24


def test_curve_without_spec_counts_one_token_per_running_request():
    curve = swa_curve(PLAIN_LOG)
    assert curve.generated == (2, 4, 6, 8, 10, 12)
    assert curve.held == (60, 62, 64, 66, 68, 70)
    assert swa_peak.growth_slope(curve) == pytest.approx(1.0)


def test_text_glued_onto_a_line_does_not_break_the_curve():
    glued = LOG.splitlines()[1] + 'INFO:     127.0.0.1:41142 - "POST /generate HTTP/1.1" 200 OK'
    assert swa_curve(glued).held == (24,)


def test_no_swa_field_is_an_empty_curve():
    log = "[t] Decode batch, #running-req: 1, #token: 40, token usage: 0.01, cuda graph: False, gen throughput (token/s): 1.0, #queue-req: 0"
    assert not swa_curve(log)
    assert not swa_curve("")


def test_bounded_curve_has_flat_slope_and_plateau():
    curve = swa_curve(LOG)
    assert abs(swa_peak.growth_slope(curve)) < 0.5
    assert swa_peak.plateau(curve) == 15.0  # median of (18, 11, 13, 17)


def test_slope_ignores_the_release_after_the_last_step():
    # The line after the final step shows the finished request's slots released.
    grown = plain_log(40, running=1) + "\n[t] Decode batch, #running-req: 1, #full token: 0, full token usage: 0.00, #swa token: 0, swa token usage: 0.00, cuda graph: False, gen throughput (token/s): 10.0, #queue-req: 0"
    assert swa_peak.growth_slope(swa_curve(grown)) == pytest.approx(1.0)


def test_describe_strings():
    swa = PROBES["swa_peak"].describe(
        {"swa_peak": 650, "swa_plateau": 420.0, "growth_slope": 1.0, "generated_tokens": 600,
         "retractions": 1}, None)
    assert swa == "peak 650 (plateau 420, slope 1.00) over 600 tok, 1 retraction"
    metric = Metric("accept_length", Kind.NOISY, (2.0, 3.0, 4.0), better="higher")
    acc = PROBES["accept_length"].describe(
        {"turn1_median": 3.0, "turn2_median": 2.5, "verify_calls": 40, "completion_tokens": 120}, metric)
    assert acc == "accept 3 (turn 1 3, turn 2 2.5; 40 verifies for 120 tok)"
    tput = PROBES["throughput"].describe(
        {"concurrency": [1, 4], "tok_s_c1_median": 50.25, "tok_s_c4_median": 150.5,
         "swa_peak_usage_c4": 0.14, "retractions": 0}, None)
    assert tput == "c1 50.2 · c4 150 tok/s, SWA peak usage 0.14, 0 retractions"


def test_probes_registered_with_their_server_flags():
    assert PROBES["swa_peak"].server_args == ("--decode-log-interval", "1", "--enable-metrics")
    assert PROBES["accept_length"].server_args == ()
    assert throughput.metric_name(8) == "tok_s_c8"
    assert accept_length.PROBE is PROBES["accept_length"]


# --------------------------------------------------------------------------- plots

REV = {Role.BASE: RevisionInfo("main", "a" * 40), Role.CANDIDATE: RevisionInfo("pr", "b" * 40)}


def _swa_cell(role: Role, log: str, config: str = "dflash") -> CellResult:
    curve = swa_curve(log)
    sample = {"generated": list(curve.generated), "swa_tokens": list(curve.held)}
    return CellResult(config=config, probe="swa_peak", role=role, revision=REV[role], status=Status.OK,
                      config_fingerprint="f", workload_fingerprint="w", samples=(sample,),
                      metrics=(Metric("swa_peak", Kind.EXACT, (float(max(curve.held)),)),),
                      facts={"swa_peak": max(curve.held)})


def _result(cells: tuple[CellResult, ...]) -> RunResult:
    keys = dict.fromkeys((c.config, c.probe) for c in cells)
    comps = tuple(ProbeComparison(config, probe, "different") for config, probe in keys)
    return RunResult(suite="swa", target="refserver", base=REV[Role.BASE], candidate=REV[Role.CANDIDATE],
                     cells=cells, comparisons=comps, launches=())


def test_draw_all_writes_png_and_svg_per_swa_comparison(tmp_path):
    cells = (_swa_cell(Role.BASE, LOG), _swa_cell(Role.CANDIDATE, PLAIN_LOG))
    plots = plot.draw_all(_result(cells), tmp_path)
    assert plots == {("dflash", "swa_peak"): "plots/dflash-swa_peak.png"}
    png, svg = tmp_path / "plots/dflash-swa_peak.png", tmp_path / "plots/dflash-swa_peak.svg"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in svg.read_text() and "<dc:date>" not in svg.read_text()
    first = (png.read_bytes(), svg.read_bytes())
    plot.draw_all(_result(cells), tmp_path)
    assert (png.read_bytes(), svg.read_bytes()) == first  # same result, same files
    assert "![dflash swa_peak](plots/dflash-swa_peak.png)" in MarkdownReport(_result(cells), plots).render()


def test_draw_all_skips_failed_sides_and_other_probes(tmp_path):
    failed = dataclasses.replace(_swa_cell(Role.BASE, LOG), status=Status.ERROR, samples=())
    other = dataclasses.replace(_swa_cell(Role.BASE, LOG, "plain"), probe="kl")
    plots = plot.draw_all(_result((failed, _swa_cell(Role.CANDIDATE, LOG), other)), tmp_path)
    assert list(plots) == [("dflash", "swa_peak")]
    assert not (tmp_path / "plots" / "plain-kl.png").exists()
    dotted = _swa_cell(Role.BASE, LOG, "ratio0.1")
    assert plot.draw_all(_result((dotted,)), tmp_path) == {("ratio0.1", "swa_peak"): "plots/ratio0.1-swa_peak.png"}
    assert (tmp_path / "plots" / "ratio0.1-swa_peak.svg").is_file()
    assert plot.draw_all(_result((failed,)), tmp_path / "none") == {}


# --------------------------------------------------------------------------- on a live server

@pytest.mark.slow
def test_throughput_levels_and_accept_length_not_applicable_without_spec(tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text(f"""
name = "live"
[models]
refserver = "{ROOT / 'fixtures/refmodels/hybrid'}"
[server]
args = ["--random-seed", "1"]
[workload]
prompts = 4
prompt_len = [16, 16]
output_len = 16
[[config]]
name = "plain"
probes = ["throughput", "accept_length"]
[probe.throughput]
concurrency = [2, 1]
repeats = 2
""")
    out = tmp_path / "run"
    proc = detcheck("run", "--suite", str(suite), "--out", str(out), "--no-progress")
    assert proc.returncode in (0, 1), proc.stderr
    result = json.loads((out / "results.json").read_text())
    cells = {(c["probe"], c["role"]): c for c in result["cells"]}
    tput = cells["throughput", "base"]
    assert tput["status"] == "ok", tput["reason"]
    assert [m["name"] for m in tput["metrics"]] == ["tok_s_c2", "tok_s_c1"]  # highest level decides
    assert [(s["repeat"], s["concurrency"]) for s in tput["samples"]] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert all(s["completion_tokens"] == 16 * s["requests"] and s["tok_s"] > 0 for s in tput["samples"])
    assert "tok/s" in proc.stdout
    acc = cells["accept_length", "candidate"]
    assert acc["status"] == "n/a" and "spec_verify_ct" in acc["reason"]
