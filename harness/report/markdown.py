"""The PR-ready Markdown report: verdict table, collapsible details, provenance footer."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import PurePosixPath
from typing import Any, Sequence

from harness.probes import PROBES
from harness.redaction import REDACTED
from harness.revisions import WORKTREES
from harness.targets import TARGETS, Target, configuration_may_set, foreign_server_argv
from harness.paths import safe_name
from harness.report.format import portable, portable_path
from harness import completeness
from harness.report.rows import (VERDICT_MARK, Sides, all_metric_sides, failure_text, figure_cells, gap_items,
                                 headline, index_item, launches_text, metric_label, metric_text, relaunch_texts,
                                 revision_label, rows, run_sessions, torch_change_text)
from harness.results import (REPRODUCER_PORT, CellResult, Metric, ProbeComparison, Reproducer, Role,
                             RunResult, Status)
from harness.textfmt import (ShellText, fmt, md_code, md_escape, md_fence, md_table, md_text, one_line, plural,
                             shell_join)

# Every string of a results file (names, refs, commit subjects, a server's words) lands here
# escaped for where it lands: md_text in prose, md_code in a code span, md_fence around log
# lines, one_line in a shell comment; a shell line is shlex-joined. A hostile results.json or
# commit must not put Markdown, HTML or commands of its own into a report that is pasted.


def _rev(info) -> str:
    subject = f" — {md_text(info.subject)}" if info.subject else ""
    return f"{md_code(info.ref)} ({md_text(info.short)}){subject}"


def rows_table(result: RunResult, sides: dict[tuple[str, str], Sides] | None = None) -> list[str]:
    """The verdict table: a row per (configuration, probe) (a combined report has one per run)."""
    return md_table(("configuration", "probe", "base", "candidate", "verdict", "comparison"),
                    ((row.config, f"`{row.probe}`", row.base, row.candidate,
                      VERDICT_MARK.get(row.verdict, row.verdict), row.note) for row in rows(result, sides)))


class MarkdownReport:
    """Renders a RunResult; `plots` maps (config, probe) to image paths relative to the report;
    `sides`: rows.all_metric_sides of the result where the caller has them (else derived here)."""

    def __init__(self, result: RunResult, plots: dict[tuple[str, str], str] | None = None,
                 sides: dict[tuple[str, str], Sides] | None = None, also: Sequence[str] = ()):
        self.result = result
        self.plots = plots or {}
        self.sides = sides if sides is not None else all_metric_sides(result)
        self.also = also  # what keeps the run from being a pass beside its record's own gaps

    def render(self) -> str:
        r = self.result
        found = [*completeness.gaps(r), *self.also]
        out = [f"## detcheck {md_code(r.suite)} on {md_text(r.target)}: base {md_text(revision_label(r.base))} → "
               f"candidate {md_text(revision_label(r.candidate))}",
               "",
               f"**Verdict: {md_text(headline(r, self.also, listed=True)) if found else headline(r)}**",
               "",
               *(f"- {md_text(gap)}" for gap in gap_items(found)),
               *([""] if found else []),
               f"Base: {_rev(r.base)}  ",
               f"Candidate: {_rev(r.candidate)}",
               ""]
        if (torch_change := torch_change_text(r)) is not None:
            out += [f"**{md_text(torch_change)}**", ""]
        if "trimmed" in r.metadata:  # a kept record whose cells were removed: say why its sides read –
            out += [f"*This record holds no cells: {md_text(str(r.metadata['trimmed']))}.*", ""]
        out += rows_table(r, self.sides)
        out += self._text_figures()
        if self.plots:
            out += ["", "Plots (relative links: attach the files to the PR, or they break once pasted):"]
        for (config, probe), path in self.plots.items():
            out += ["", f"![{md_text(config)} {md_text(probe)}]({path})"]
        out += ["", "<details><summary>Details: metrics, per-request samples, failures</summary>", ""]
        for comp in r.comparisons:
            out += self._details(comp.config, comp.probe)
        out += ["</details>", ""]
        out += self._footer()
        return "\n".join(out) + "\n"

    def _text_figures(self) -> list[str]:
        """Each pair's figure in text, from its probe's `text_figure` hook: it stays when the
        report is pasted somewhere its image links break."""
        out = []
        for comp in self.result.comparisons:
            kind = PROBES.get(comp.probe)
            cells = figure_cells(self.result, comp)
            if kind is not None and kind.text_figure is not None and cells:
                out += ["", f"**{md_text(comp.config)} / {md_code(comp.probe)}**", "", *kind.text_figure(cells)]
        return out

    def _details(self, config: str, probe: str) -> list[str]:
        r = self.result
        base, cand = r.cell(config, probe, Role.BASE), r.cell(config, probe, Role.CANDIDATE)
        comp = next(c for c in r.comparisons if c.config == config and c.probe == probe)
        out = [f"#### {md_text(config)} / {md_code(probe)}", ""]
        if comp.metrics:
            body = []
            sides = self.sides[(config, probe)]
            for name, c in comp.metrics.items():
                metrics = sides.get(name, (None, None))
                item = index_item(comp, base, metrics[0])
                body.append((metric_label(comp.probe, name), c.kind.value, *(_summary(s, m, item) for s, m in zip((c.base, c.candidate), metrics)),
                             metric_text(comp, name, base, cand, sides), c.verdict.value))
            out += md_table(("metric", "kind", "base", "candidate", "comparison", "verdict"), body)
            out.append("")
        for side, cell in (("base", base), ("candidate", cand)):
            if cell is None:
                continue
            if cell.status != Status.OK:
                out += [f"**{side}: {cell.status.value}** — {md_escape(portable(failure_text(cell)))}", ""]
                if cell.status == Status.FINDING and cell.samples:
                    out += [f"{side}'s evidence (first of {len(cell.samples)} in results.json):", "",
                            *md_fence(json.dumps(s, default=str) for s in cell.samples[:3]), ""]
                if cell.log_tail:
                    out += [*md_fence(portable(line) for line in cell.log_tail.splitlines()[-15:]), ""]
        out += self._facts(comp, base, cand)
        if comp.reproducer is not None:
            reference = _reference_config(comp)
            lines = self._server_lines(base, cand, SERVER_PORTS)
            if reference:  # its requests go to the reference configuration's servers too
                lines += [f"# and the reference configuration {one_line(reference)}, each side likewise",
                          *self._server_lines(r.cell(reference, probe, Role.BASE),
                                              r.cell(reference, probe, Role.CANDIDATE), REFERENCE_PORTS)]
            out += _reproducer(comp.reproducer, lines, self._command_lines(comp.reproducer), bool(reference))
        return out

    def _command_lines(self, rep: Reproducer) -> list[str]:
        """The shell lines that measure a row again whose reproducer is a measurement
        (`Reproducer.command`): `detcheck run` with the run's own options (those results.json
        recorded), both sides at the shas measured, and the row's own; every word quoted, the
        repository read from `$REPO` (the run's own unless set)."""
        if not rep.command:
            return []
        r = self.result
        options = r.metadata.get("options") or {}
        words: list[str] = ["detcheck", "run", "--repo", ShellText('"$REPO"')]
        suite = options.get("suite") or r.metadata.get("suite_path")
        if suite:
            words += ["--suite", str(suite)]
        words += ["--target", str(options.get("target") or r.target)]
        for dest, flag in RUN_FLAGS:
            value = options.get(dest)
            for item in (value if isinstance(value, list) else [value] if value else []):
                if flag == "--set" and any(str(item).startswith(f"{word.split('=')[0]}=") for word in rep.command):
                    continue  # the row's own value of that parameter is given below
                words += [flag, str(item)]
        words += ["--base", str(r.base.sha or r.base.ref), "--candidate", str(r.candidate.sha or r.candidate.ref),
                  *rep.command, "--out", f"detcheck-again-{safe_name(rep.command[1] if len(rep.command) > 1 else 'row')}"]
        repo = options.get("repo")
        return ["# the repository the run measured (set REPO to your checkout of it)",
                f"REPO=${{REPO:-{shlex.quote(portable_path(str(repo))) if repo else ''}}}",
                # portable() after the quoting: it rewrites paths within a word, never across quotes
                portable(shell_join(words))]

    def _server_lines(self, base: CellResult | None, cand: CellResult | None,
                      ports: dict[Role, str]) -> list[str]:
        """The shell lines that start each side's server for one row: that row's cells' own
        argv (a configuration's flags differ row by row) and environment, each side on its own
        port (`ports`: the shell variable of each), its revision's code on PYTHONPATH."""
        r = self.result
        target = TARGETS.get(r.target)
        lines = []
        for role, info, cell in ((Role.BASE, r.base, base), (Role.CANDIDATE, r.candidate, cand)):
            if cell is None or not cell.metadata.get("server_argv"):
                continue
            # A revision's name is a comment on one line: a line break in it would be a command.
            lines += [f"# the {role.value}, from the root of a checkout of {one_line(info.sha or info.ref)}",
                      server_line(r.target, cell.metadata["server_argv"], cell.metadata.get("server_env") or {},
                                  served_from(cell, target), ports[role])]
        return lines

    def _facts(self, comp: ProbeComparison, base: CellResult | None, cand: CellResult | None) -> list[str]:
        facts = [comp.facts(cell) if cell else {} for cell in (base, cand)]
        keys: list[str] = []
        for side in facts:
            for k, v in side.items():
                if k not in keys and not isinstance(v, (list, dict)):
                    keys.append(k)
        if not keys:
            return []

        def get(side: dict[str, Any], k: str) -> str:
            return fmt(side[k]) if k in side else "–"
        return md_table(("fact", "base", "candidate"), ((k, *(get(side, k) for side in facts)) for k in keys)) + [""]

    def _server_args_lines(self) -> list[str]:
        """Each configuration's server args, in the run's order: one line where both sides
        started alike (but for the port each server was given), else one per side."""
        argv: dict[str, dict[str, list[str]]] = {}
        for c in self.result.cells:
            if c.metadata.get("server_argv"):
                argv.setdefault(c.config, {}).setdefault(c.role.value, [str(a) for a in c.metadata["server_argv"]])
        out = []
        for config, sides in argv.items():
            # portable() after the quoting: it rewrites paths within a word, never across quotes;
            # an argv that does not start the target's server is named, never printed as a command
            lines = {role: (f"not shown: {foreign}" if (foreign := foreign_server_argv(self.result.target, args))
                            else portable(shlex.join(args))) for role, args in sides.items()}
            if len({shlex.join(without_port(args)) for args in sides.values()}) == 1:
                out.append(f"- server args ({md_text(config)}): {shown(next(iter(lines.values())))}")
            else:
                out += [f"- server args ({md_text(config)} @ {role}): {shown(line)}" for role, line in lines.items()]
        return out

    def _footer(self) -> list[str]:
        r = self.result
        meta = r.metadata
        out = ["<details><summary>Provenance</summary>", ""]
        out.append(f"- {launches_text(r)}")
        out += [f"- relaunched {md_text(text)}" for text in relaunch_texts(r)]
        for role, info in ((Role.BASE, r.base), (Role.CANDIDATE, r.candidate)):
            out.append(f"- {role.value}: {md_code(info.sha or info.ref)} {md_text(info.subject)}")
        cell = next((c for c in r.cells if c.metadata.get("server_argv")), None)
        if cell is not None:
            m = cell.metadata
            env = ", ".join(k for k in (m.get("gpu_name"), m.get("torch") and f"torch {m['torch']}",
                                        m.get("cuda") and f"CUDA {m['cuda']}") if k)
            if env:
                out.append(f"- environment: {md_text(env)}; machine {md_text(str(m.get('machine', '?')))}")
        out += self._server_args_lines()
        sessions = run_sessions(r)
        if sessions:  # resumed: the command that started it, then each that continued it
            out.append(f"- command: {md_code(portable(str(sessions[0].get('command', ''))))}")
            out += [f"- resumed: {md_code(portable(str(s.get('command', ''))))}" for s in sessions[1:]]
        elif meta.get("command"):
            out.append(f"- command: {md_code(portable(str(meta['command'])))}")
        out.append(f"- detcheck {md_text(str(meta.get('harness_version', '?')))}, "
                   f"{md_text(str(meta.get('started_at', '?')))} → {md_text(str(meta.get('finished_at', '?')))}")
        out += ["", "</details>"]
        return out



def shown(line: str) -> str:
    """A provenance line's server args: a command as code, a refusal to print one as text."""
    return md_text(line) if line.startswith("not shown: ") else md_code(line)


def without_port(argv: list[str]) -> list[str]:
    """A server's argv without its `--port` value: drawn per launch, never the configuration's."""
    return [a for i, a in enumerate(argv) if not (i and argv[i - 1] == "--port")]


def _reference_config(comp: ProbeComparison) -> str:
    """The configuration a row's reproducer is posted to besides its own (the reference
    probe's, where it compares against one: its judged facts name it), else ""."""
    if "diverging" not in comp.metrics:
        return ""
    return next((str(facts["reference"]) for facts in comp.judged.values() if facts.get("reference")), "")


# Every shell block of a reproducer sets the ports first: from the reader's own `PORT`, else
# SGLang's default, one port per server (both sides may run on one machine).
PORT_LINE = f"PORT=${{PORT:-{REPRODUCER_PORT}}}"
SERVER_PORTS = {Role.BASE: "$BASE_PORT", Role.CANDIDATE: "$CANDIDATE_PORT"}
REFERENCE_PORTS = {Role.BASE: "$REFERENCE_BASE_PORT", Role.CANDIDATE: "$REFERENCE_CANDIDATE_PORT"}


def port_lines(reference: bool) -> list[str]:
    """`PORT`, then each server's port from it: the base's $PORT, the candidate's $PORT + 1 (a
    reference configuration's servers: + 2 and + 3)."""
    lines = [PORT_LINE, "BASE_PORT=$PORT CANDIDATE_PORT=$((PORT + 1))"]
    if reference:
        lines.append("REFERENCE_BASE_PORT=$((PORT + 2)) REFERENCE_CANDIDATE_PORT=$((PORT + 3))")
    return lines


# The recorded argv leaves out the interpreter (a path of the machine that ran it).
SERVER_PYTHON = "python3"
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def served_from(cell: CellResult, target: Target | None) -> str:
    """The PYTHONPATH entry the cell's server imported its package from, as a line run from the
    root of a checkout of its revision reads it: a revision's worktree as the path in its tree
    (python), any other directory as the run used it (no worktree: the project's fixtures)."""
    package = target.package if target is not None else ""
    found = cell.metadata.get(f"{package}_path") if package else None
    if not isinstance(found, str) or not found:
        return target.package_dir if target is not None else ""
    return in_checkout(str(PurePosixPath(found).parent))


def in_checkout(path: str) -> str:
    """A path as a line run from the root of a checkout of its revision reads it: a file of a
    revision's worktree (<cache>/worktrees/<repo>/<sha>/<tree>) as its path in the tree, any
    other path as it is."""
    parts = PurePosixPath(path).parts
    if path.startswith("/") and WORKTREES in parts[:-1]:  # a whole word that is a path, never `--flag=/…`
        at = len(parts) - 1 - parts[::-1].index(WORKTREES)
        if len(parts) > at + 3:
            return "/".join(parts[at + 3:])
        if len(parts) == at + 3:
            return "."
    return path


def server_line(target: str, argv: list, env: dict[str, str] | None = None, pythonpath: str = "",
                port: str = "$BASE_PORT") -> str:
    """A server's recorded argv as a line that starts it on the shell's `port` (a variable):
    `env` with the configuration's environment and the revision's code in front of PYTHONPATH
    (as the run started it: an editable install would otherwise serve its own code to both
    sides), every word shell-quoted but the port (a model directory named `m $(touch x)` stays
    one word); each path of a worktree as its path in the checkout, any other as the run used
    it (the model path too). A value the results redacted is read from the reader's own
    environment. A results.json may come from elsewhere: an argv that does not start the
    target's server (`-c …`) is a comment saying so, never the line, and a variable a results
    file may not set (`targets.configuration_may_set`: a loader's, or a path) is left out of
    the line, named in a comment above it."""
    foreign = foreign_server_argv(target, argv)
    if foreign:
        return f"# not shown: {one_line(foreign)}"
    assignments: list[str] = []
    withheld: list[str] = []
    for name, value in (env or {}).items():
        if value == REDACTED and _SHELL_NAME.fullmatch(name):
            assignments.append(ShellText(f'"{name}=${name}"'))
        elif name != "PYTHONPATH" and configuration_may_set(name, value):
            assignments.append(f"{name}={value}")
        else:
            withheld.append(name)
    if pythonpath:
        assignments.append(f"PYTHONPATH={pythonpath}")
    words = [*(["env", *assignments] if assignments else []), SERVER_PYTHON, *(in_checkout(str(a)) for a in argv)]
    for i, word in enumerate(words[:-1]):
        if word == "--port":
            words[i + 1] = ShellText(f'"{port}"')
    if withheld:
        return (f"# left out: {one_line(', '.join(withheld))}, which results.json sets for the server and a results "
                f"file may not (it may change what code runs): add it yourself if you trust the file\n"
                + shell_join(words))
    return shell_join(words)


# The options of `detcheck run` that results.json records (commands/run.py, RUN_OPTIONS) and a
# row's measurement again repeats, beside --repo, --suite and --target: what it measured with.
RUN_FLAGS = (("python", "--python"), ("base_python", "--base-python"), ("candidate_python", "--candidate-python"),
             ("server_arg", "--server-arg"), ("overrides", "--set"), ("env_file", "--env-file"),
             ("env_pip_arg", "--env-pip-arg"))


def _reproducer(rep: Reproducer, server_lines: list[str], command_lines: Sequence[str] = (),
                reference: bool = False) -> list[str]:
    """A *different* row's smallest request: the commands that start each side's server with
    the row's own argv, each step's curl line, what to compare, how it was shrunk; a row no
    request shows (`command_lines`): the command that measures it again."""
    first = rep.first_divergent
    facts = [*([f"prompts {list(rep.prompts)}"] if rep.prompts else []),
             *([f"first divergent: {divergence_text(first)}"] if first else []),
             f"re-measurements: {rep.re_measurements}"]
    out = [f"**Reproducer** ({md_text('; '.join(facts))}). {md_escape(rep.shrink)}.", "",
           md_escape(verification_text(rep)), ""]
    if rep.position_range is not None:
        out += [f"State first diverges in positions [{rep.position_range[0]}, {rep.position_range[1]}).", ""]
    if command_lines:
        out += ["Measure it again (from a checkout of detcheck; both sides' servers are started as this run "
                "started them):", "", *md_fence(command_lines, "sh"), ""]
    ports = port_lines(reference)
    if server_lines and not command_lines:
        out += [f"Start each side's server with this row's configuration, each from the root of a checkout of its "
                f"revision (its environment's `{SERVER_PYTHON}`; the base on `PORT`, {REPRODUCER_PORT} unless set, "
                f"the candidate on `PORT` + 1{', the reference configuration on + 2 and + 3' if reference else ''}):",
                "", *md_fence([*ports, *server_lines], "sh"), ""]
    if rep.requests:
        order = ('"$BASE_PORT" "$REFERENCE_BASE_PORT" "$CANDIDATE_PORT" "$REFERENCE_CANDIDATE_PORT"' if reference
                 else '"$BASE_PORT" "$CANDIDATE_PORT"')
        # A request's `what` is a comment on one line: a line break in it would be a command.
        out += ["Post to each server, in order (each answer on a line of its own):", "",
                *md_fence([*ports, f"for PORT in {order}; do", 'echo "# the server on port $PORT"',
                           *(line for r in rep.requests
                             for line in (f"# {one_line(r.what)}", r.curl_to_port_variable())), "done"], "sh"), ""]
    return out + [f"Expect: {md_escape(rep.expect)}", ""]


def verification_text(rep: Reproducer) -> str:
    """Whether the reproducer was posted to servers of both sides and showed the difference, in
    one sentence that leads with the outcome."""
    v = rep.verification
    if v is None and rep.command:
        return ("A measurement, not a request: no request shows it, so none was posted; the command below "
                "measures the row again, both sides interleaved as this run measured them.")
    if v is None:
        return ("Not verified on servers: built from the stored samples alone (a run that verifies posts it to "
                "both sides' servers first).")
    if v.error:
        return f"Not verified on servers ({v.servers}): {v.error}."
    ran_out = f"; the budget of {v.budget} requests ran out" if v.budget_ran_out else ""
    at = f" at {v.dimension} {v.size}" if v.dimension else ""
    if v.shows:
        return (f"Verified: reproduced {v.reproduced} of {v.attempts} on servers of both sides ({v.servers}){at}, "
                f"{v.calls} requests posted{ran_out}.")
    if v.reproduced:
        return (f"Reproduced only {v.reproduced} of {v.attempts} on servers of both sides ({v.servers}){at}, "
                f"{v.calls} requests posted{ran_out}: not a reliable reproducer.")
    return (f"**Not reproduced** on servers of both sides ({v.servers}): 0 of {v.attempts}{at}, {v.calls} requests "
            f"posted{ran_out}. The requests below are the whole request measured, not a reproducer.")


def divergence_text(first: dict) -> str:
    """A reproducer's first divergence in words: "prompt 0, position 5 (cache hit vs cold replay,
    on the candidate, 48 cached tokens)"; keys it does not know as "key value"."""
    where = {"prompt": "prompt {}", "position": "position {}", "batch_size": "batch size {}", "index": "value {}"}
    about = {"what": "{}", "side": "on the {}", "cached_tokens": "{} cached tokens"}
    place = [where[k].format(v) for k, v in first.items() if k in where]
    if "metric" in first:  # a located difference: the deciding metric's value i
        place = [f"{first['metric']} {', '.join(place)}".strip()]
    notes = [about[k].format(v) for k, v in first.items() if k in about]
    notes += [f"{k} {v}" for k, v in first.items() if k not in where and k not in about and k != "metric"]
    return ", ".join(place) + (f" ({', '.join(notes)})" if notes else "")


def _summary(s, metric: Metric | None, item: str) -> str:
    """A side's values: the statistic the row shows, named, over how many of what."""
    if metric is None or s.n != len(metric.values):
        return f"median {fmt(s.median)} ({plural(s.n, 'value')})"
    if s.n == 1:
        return fmt(metric.values[0]) if item == "value" else f"{fmt(metric.values[0])} (1 {item})"
    if metric.headline_value() is None:  # ids, flattened top-k lists: equal or not, no statistic
        return plural(s.n, item)
    return f"{metric.headline} {fmt(metric.headline_value())} over {plural(s.n, item)}"
