"""The history as a static dashboard: one folder (index.html, history.json, the pairs' reports),
no server, nothing fetched (inline CSS and SVG, no CDN): it opens offline from a file:// URL.

Per (configuration, probe) a timeline: a mark per revision (its exact verdict against the
previous measured revision, linking to that pair's report and, where it differs, its
reproducer) and a plot per noisy metric (each revision's median, its repeats' range, change
points as vertical lines linking to the confirming pair's report). On top, a summary of what
changed where. A short inline script counts the plots drawn (`data-plots-drawn` on <body>):
what the browser test reads.
"""

from __future__ import annotations

import html
from pathlib import Path

from harness.history.model import ChangePoint, History, Mark, Series, Timeline, confirmed
from harness.result_files import atomic_write_text, strict_json

INDEX, FEED = "index.html", "history.json"

MARK_COLOURS = {"same": "#2e7d32", "different": "#c62828", "unknown": "#f9a825", "first": "#1565c0",
                "n/a": "#9e9e9e", "error": "#212121", "missing": "#e0e0e0", "": "#90a4ae"}
STEP, LEFT, PLOT_H, PLOT_TOP = 22, 150, 150, 44

STYLE = """body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
svg{display:block;margin:.3em 0}h2{margin-top:1.6em;font-size:1.1em}.dim{color:#666}
.legend span{display:inline-block;margin-right:1em}.legend i{display:inline-block;width:10px;height:10px;margin-right:3px}"""

SCRIPT = """document.addEventListener('DOMContentLoaded', function () {
  var drawn = 0;
  document.querySelectorAll('svg.plot').forEach(function (svg) {
    var box = svg.getBBox();
    if (box.width > 0 && box.height > 0 && svg.querySelectorAll('rect,circle,polyline').length > 0) drawn++;
  });
  document.body.setAttribute('data-plots-drawn', String(drawn));
});"""


def e(text: object) -> str:
    return html.escape(str(text), quote=True)


def write_dashboard(history: History, out_dir: Path) -> Path:
    """index.html and history.json into `out_dir` (the pairs' reports are there already)."""
    atomic_write_text(out_dir / FEED, strict_json(history.to_dict()))
    atomic_write_text(out_dir / INDEX, render(history))
    return out_dir / INDEX


def render(history: History) -> str:
    n = len(history.points)
    body = [f"<h1>detcheck history: {e(Path(history.suite).name)} on {e(Path(history.repo).name)}</h1>",
            f"<p class=dim>{n} revisions, {e(history.points[0].label)} … {e(history.points[-1].label)}; "
            f"target {e(history.target)}; servers started to measure: {history.cost.measured_servers} "
            f"({history.cost.reused_revisions} revisions wholly from the store), to confirm change points: "
            f"{history.cost.confirmation_servers}. Feed: <a href='{FEED}'>{FEED}</a>.</p>",
            summary(history), legend(),
            *(timeline(history, t) for t in history.timelines), revisions_table(history)]
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>detcheck history</title>"
            f"<style>{STYLE}</style><script>{SCRIPT}</script></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


def change_rows(t: Timeline) -> list[tuple[int, str, list[tuple[str, str]]]]:
    """(revision index, what changed, its links) of one timeline: exact differences and change
    points, rejected ones included (the paired run says so)."""
    rows = [(i, f"exact figures differ from {m.against[:12]}: {m.note}; {confirmed(m.confirmation)}",
             [("pair report", m.report), ("reproducer", m.reproducer), ("paired run", m.confirmation_report)])
            for i, m in enumerate(t.marks) if m.verdict == "different"]
    for s in t.series:
        rows += [(cp.index, f"{s.metric}: change point, {cp.before:.4g} → {cp.after:.4g} {s.unit} ({cp.relative:+.1%}); "
                            f"{confirmed(cp.confirmation)}{': ' + cp.confirmation_note if cp.confirmation_note else ''}",
                  [("paired run", cp.report), ("reproducer", cp.reproducer)]) for cp in s.change_points]
    return sorted(rows, key=lambda r: r[0])


def links(items: list[tuple[str, str]]) -> str:
    return " · ".join(f"<a href='{e(href)}'>{e(name)}</a>" for name, href in items if href)


def summary(history: History) -> str:
    rows = [(t, *row) for t in history.timelines for row in change_rows(t)]
    if not rows:
        return "<h2>What changed</h2><p>Nothing: every exact figure compares same between neighbours, and no noisy series shifts.</p>"
    lines = [f"<tr><td>{e(history.points[i].label)}</td><td><a href='#{e(anchor(t))}'>{e(t.config)} × {e(t.probe)}</a></td>"
             f"<td>{e(what)}</td><td>{links(refs)}</td></tr>" for t, i, what, refs in sorted(rows, key=lambda r: r[1])]
    return ("<h2>What changed</h2><table><tr><th>revision</th><th>timeline</th><th>change</th><th>links</th></tr>"
            + "".join(lines) + "</table>")


def legend() -> str:
    return "<p class=legend>" + "".join(f"<span><i style='background:{c}'></i>{e(v or 'noisy only')}</span>"
                                        for v, c in MARK_COLOURS.items()) + "</p>"


def anchor(t: Timeline) -> str:
    return f"t-{t.config}-{t.probe}".replace(" ", "_")


def timeline(history: History, t: Timeline) -> str:
    parts = [f"<h2 id='{e(anchor(t))}'>{e(t.config)} × {e(t.probe)}</h2>", marks_svg(history, t)]
    parts += [series_svg(history, s) for s in t.series]
    parts += [f"<p>{e(history.points[i].label)}: {e(what)} — {links(refs)}</p>" for i, what, refs in change_rows(t)]
    return "\n".join(parts)


def x_of(i: int) -> float:
    return LEFT + i * STEP + STEP / 2


def marks_svg(history: History, t: Timeline) -> str:
    width = LEFT + STEP * len(history.points) + 10
    items = ["<text x=0 y=16>exact verdicts</text>"]
    for i, (mark, point) in enumerate(zip(t.marks, history.points)):
        items.append(link(mark_shape(i, mark, point.label), mark.report))
    return f"<svg class=plot width={width} height=26 role=img aria-label='verdicts'>{''.join(items)}</svg>"


def mark_shape(i: int, mark: Mark, label: str) -> str:
    key = mark.verdict if mark.status == "ok" else mark.status
    title = (f"{label}: {mark.status}" + (f", {mark.verdict}" if mark.verdict else "")
             + (f": {mark.note}; {confirmed(mark.confirmation)}" if mark.note else ""))
    size = 16 if key == "different" else 12
    return (f"<rect x={x_of(i) - size / 2:.1f} y={13 - size / 2:.1f} width={size} height={size} "
            f"fill='{MARK_COLOURS.get(key, '#90a4ae')}'><title>{e(title)}</title></rect>")


def link(inner: str, href: str) -> str:
    return f"<a href='{e(href)}'>{inner}</a>" if href else inner


def series_svg(history: History, s: Series) -> str:
    medians = s.medians
    known = [v for vals in s.values for v in vals]
    if not known:
        return ""
    low, high = min(known), max(known)
    span = (high - low) or abs(high) or 1.0
    width = LEFT + STEP * len(history.points) + 10

    def y(v: float) -> float:  # below the metric's name and unit
        return PLOT_TOP + (PLOT_H - PLOT_TOP - 8) * (1 - (v - low) / span)

    items = [f"<text x=0 y=16>{e(s.metric)}</text>",
             f"<text x=0 y=34 class=dim>{e(s.unit)}{', ' + e(s.better) + ' is better' if s.better else ''}</text>",
             f"<text x=0 y={y(high) + 4:.1f} class=dim>{high:.4g}</text>",
             f"<text x=0 y={y(low) + 4:.1f} class=dim>{low:.4g}</text>"]
    for cp in s.change_points:
        items.append(change_line(cp, history.points[cp.index].label))
    line = " ".join(f"{x_of(i):.1f},{y(m):.1f}" for i, m in enumerate(medians) if m is not None)
    items.append(f"<polyline points='{line}' fill=none stroke='#1565c0' stroke-width=1.5 />")
    for i, (vals, m) in enumerate(zip(s.values, medians)):
        if m is None:
            continue
        items.append(f"<line x1={x_of(i):.1f} x2={x_of(i):.1f} y1={y(min(vals)):.1f} y2={y(max(vals)):.1f} stroke='#90caf9' />")
        items.append(f"<circle cx={x_of(i):.1f} cy={y(m):.1f} r=3 fill='#1565c0'>"
                     f"<title>{e(history.points[i].label)}: median {m:.4g} of {len(vals)}</title></circle>")
    return f"<svg class=plot width={width} height={PLOT_H} role=img aria-label='{e(s.metric)}'>{''.join(items)}</svg>"


def change_line(cp: ChangePoint, label: str) -> str:
    x = x_of(cp.index) - STEP / 2
    colour = {"different": "#c62828", "same": "#9e9e9e"}.get(cp.confirmation, "#f9a825")
    title = (f"change point at {label}: {cp.before:.4g} → {cp.after:.4g} ({cp.relative:+.1%}); "
             f"paired run: {cp.confirmation or 'not run'} {cp.confirmation_note}")
    return link(f"<rect x={x - 2:.1f} y={PLOT_TOP - 4} width=4 height={PLOT_H - PLOT_TOP + 4} fill='{colour}' opacity=0.7>"
                f"<title>{e(title)}</title></rect>", cp.report)


def revisions_table(history: History) -> str:
    rows = []
    for i, p in enumerate(history.points):
        changes = "; ".join(f"{t.config}/{t.probe}: {what}" for t in history.timelines for j, what in t.changes if j == i)
        label = p.label if p.label != p.sha[:12] else ""  # a tag or branch; a bare sha is in its column
        rows.append(f"<tr><td>{i}</td><td><code>{e(p.sha[:12])}</code></td><td>{e(label)}</td>"
                    f"<td>{e(p.subject)}</td><td>{e(changes)}</td></tr>")
    return ("<h2>Revisions</h2><table><tr><th>#</th><th>sha</th><th>label</th><th>subject</th><th>changed</th></tr>"
            + "".join(rows) + "</table>")
