"""Plot files from stored results: one per comparison whose probe has a plot hook (swa_peak)."""

from __future__ import annotations

import dataclasses

from harness.probes import swa_peak
from harness.probes.common import swa_curve
from harness.report import plot
from harness.report.markdown import MarkdownReport
from harness.results import CellResult, Metric, ProbeComparison, RevisionInfo, Role, RunResult, Status
from harness.verdict_stats import Kind
from swa_logs import LOG, PLAIN_LOG

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
    assert "![dflash swa\\_peak](plots/dflash-swa_peak.png)" in MarkdownReport(_result(cells), plots).render()


def test_draw_all_skips_failed_sides_and_probes_without_a_plot(tmp_path):
    failed = dataclasses.replace(_swa_cell(Role.BASE, LOG), status=Status.ERROR, samples=())
    other = dataclasses.replace(_swa_cell(Role.BASE, LOG, "plain"), probe="kl")
    plots = plot.draw_all(_result((failed, _swa_cell(Role.CANDIDATE, LOG), other)), tmp_path)
    assert list(plots) == [("dflash", "swa_peak")]
    assert not (tmp_path / "plots" / "plain-kl.png").exists()
    dotted = _swa_cell(Role.BASE, LOG, "ratio0.1")
    assert plot.draw_all(_result((dotted,)), tmp_path) == {("ratio0.1", "swa_peak"): "plots/ratio0.1-swa_peak.png"}
    assert (tmp_path / "plots" / "ratio0.1-swa_peak.svg").is_file()
    assert plot.draw_all(_result((failed,)), tmp_path / "none") == {}


def test_the_file_name_keeps_only_safe_characters():
    assert plot.png_path("a/b c-swa_peak") == "plots/a_b_c-swa_peak.png"


def test_the_curves_read_as_text_where_the_image_is_not():
    """Without any plot drawn, report.md shows both curves as sparklines on one scale: the base
    (DFLASH, evicting: peak 24) stays low beside the candidate (no eviction: up to 70), which
    ends at 12 of the 23 generated tokens."""
    cells = (_swa_cell(Role.BASE, LOG), _swa_cell(Role.CANDIDATE, PLAIN_LOG))
    lines = MarkdownReport(_result(cells)).render().splitlines()
    at = lines.index("**dflash / `swa_peak`**")
    assert lines[at + 2] == ("SWA tokens held (`#swa token`) over 0–23 generated tokens, 23 characters "
                             "(each the largest count in its stretch), ▁ 0 … █ 70:")
    table = {row.split(" | ")[0].strip("| "): row.split(" | ")[1:] for row in lines[at + 6:at + 8]}
    base, cand = (table[side][0].strip("`") for side in ("base", "candidate"))
    assert len(base) == len(cand) == 23  # one character per generated token: no narrower column
    assert max(base) == "▃" and max(cand) == "█"  # 24 and 70 on a scale to 70
    assert cand == "  " + "▇" * 6 + "█" * 5 + " " * 10  # tokens 2…12 of 23 hold 60 → 70
    assert [table[side][1] for side in ("base", "candidate")] == ["24 |", "70 |"]


def test_many_requests_show_the_first_few_and_say_so():
    many = dataclasses.replace(_swa_cell(Role.BASE, LOG), samples=_swa_cell(Role.BASE, LOG).samples * 6)
    text = swa_peak.text_figure({Role.BASE: many})
    assert text[0].endswith("; base: first 4 of 6 requests:")
    assert [row.split(" | ")[0] for row in text[4:]] == [f"| base, request {i}" for i in range(1, 5)]


def test_an_identical_candidate_line_is_dashed_and_said_so_never_hiding_the_bases(tmp_path, monkeypatch):
    import contextlib

    from matplotlib.figure import Figure

    drawn = []

    @contextlib.contextmanager
    def kept_figure(out_dir, name):
        drawn.append(Figure().add_subplot())
        yield drawn[-1]

    monkeypatch.setattr(plot, "figure", kept_figure)
    for candidate_log, dashed in ((LOG, True), (PLAIN_LOG, False)):
        cells = {Role.BASE: _swa_cell(Role.BASE, LOG), Role.CANDIDATE: _swa_cell(Role.CANDIDATE, candidate_log)}
        swa_peak.plot("dflash", cells, tmp_path)
        base, cand = drawn[-1].get_lines()
        assert (base.get_linestyle(), cand.get_linestyle()) == ("-", "--" if dashed else "-")
        assert ("identical to the base" in cand.get_label()) == dashed
