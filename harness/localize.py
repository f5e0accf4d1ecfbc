"""Localize an exact *different* row: the first module whose inputs agree and whose output differs.

`detcheck localize --out RUN_DIR --repo R --row CONFIG/PROBE` takes the row's verified reproducer
from the run's results.json and, per side in turn, starts one server from the cell's recorded
argv (checked first: `RecordedServer`, as a results.json may come from elsewhere) with SGLang's tensor dumper set up through its environment (SGLang 0.5.16's
`sglang.srt.debug_utils.dumper`: `DUMPER_DIR`, `DUMPER_EXP_NAME` = the side,
`DUMPER_NON_INTRUSIVE_MODE=all`: forward hooks on every module of the model, registered by
`ModelRunner` at load; `DUMPER_ENABLE_OUTPUT_CONSOLE=0`: no log line per tensor), posts the
reproducer's requests (`verify.post_all`), and stops it. The dumper is enabled only for those
requests: started with `DUMPER_ENABLE=0` and `DUMPER_SERVER_PORT=reuse` (the hooks register,
nothing dumps, the server serves `/dumper/{method}`), then `POST /dumper/configure {"enable":
true}` once it is up, so its warm-up passes are not dumped (a dumper enabled at boot dumps every
warm-up prefill: upstream's notes record one filling a shared disk). A revision without that
route (`DUMPER_CONTROL`) on either side gets the dumper at boot on both, said on stderr. SGLang's
hooks do not fire when a CUDA graph replays, so its servers get the revision's own graphs-off
flags, as a `cuda_graph = false` configuration does (`Capabilities.graphs_off_args`: the
per-phase backends `disabled` where `--help` has them; Inkling's prefill graph is on by default
and `--disable-cuda-graph` alone leaves it on). The dumps (one file per tensor, see
`harness/dumpdiff.py`) are compared in forward order by the servers' interpreter; `culprit`
reads the answer:

* the first tensor that differs is a module's output: that module, its dumped inputs all agreed
  (they came before it);
* it is a module's input: the code of the module around it (its own code between its
  submodules) — that module's inputs agreed, what it computed inline did not;
* it is the forward batch (`input_ids`, `positions`, …): the model was fed differently, so the
  difference is before it (the scheduler, the cache);
* a tensor only one side dumped: the sides ran different modules;
* nothing differs: the difference is after the last dumped module (sampling?).

Two outcomes name nothing and are exit 3: the sides' answers to the reproducer were alike on the
dumping servers (graphs off: a graphs-only difference does not show there), or no tensor was
compared.

The record is `localize.json` in the run directory (versioned: `SCHEMA`), one entry per row
localized, and `localize.md`, the section (`markdown`). A revision without the dumper's module
hooks is refused before anything starts (exit 2); a side whose server wrote no dumps is exit 3.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.capabilities import (GRAPH_ALL_FLAG, GRAPH_BACKEND_FLAGS, GRAPH_PHASE_FLAGS, NotExpressible,
                                   revision_capabilities)
from harness.client import Generation, SGLangClient
from harness.errors import LaunchError, UsageError
from harness.jobs import REPRODUCER_BUDGET
from harness.paths import PROJECT_ROOT, safe_name
from harness.redaction import REDACTED, scrub, scrub_file
from harness.result_files import atomic_write_json, atomic_write_text, read_json, read_run
from harness.results import REPRODUCER_PORT, ProbeComparison, Role, RunResult
from harness.revisions import Revision
from harness.server import launch
from harness.suite import Suite
from harness.targets import (CONFIG_ENV_NAMES, CONFIG_ENV_PREFIXES, HOST, TRANSIENT_LAUNCH_FAILURES, Target,
                             configuration_may_set, foreign_server_argv)
from harness.textfmt import fmt, md_code, md_table, plural
from harness.verdict_stats import Kind, Verdict
from harness.verify import post_all

# 2: `answers_differ`, a tensor's `only` side
SCHEMA = 2
LOCALIZE_FILE = "localize.json"
SECTION_FILE = "localize.md"
LOCALIZE_DIR = "localize"  # each row's dumps and dumping servers' logs, under the run directory
# Where each target's dumper lives in a checkout, and the text that says it hooks modules.
DUMPER_SOURCE = {"sglang": ("python/sglang/srt/debug_utils/dumper.py", "register_non_intrusive_dumper"),
                 "refserver": ("python/refserver/dumper.py", "DUMPER_NON_INTRUSIVE_MODE")}
# Where each target serves the dumper's run-time control, and the text that says it does.
DUMPER_CONTROL = {"sglang": ("python/sglang/srt/entrypoints/http_server.py", "DUMPER_SERVER_PORT"),
                  "refserver": ("python/refserver/api.py", "control_on_server_port")}
# Every spelling of a graph switch: a recorded one is dropped before the revision's graphs-off
# flags are added (hooks never run in a replay). The backend flags take a value.
GRAPH_SWITCHES = (*GRAPH_PHASE_FLAGS, GRAPH_ALL_FLAG)
# SGLang's non-intrusive dump names: `non_intrusive__<module>.inputs.<i>` / `...output[.<k>]`,
# the root model's without a module.
_HOOKED = re.compile(r"non_intrusive__(?:(?P<module>.+)\.)?(?P<part>inputs|output)(?:\.(?P<key>.+))?")
# How many agreeing tensors before the difference the record keeps.
AGREED_SHOWN = 8
COMPARE_TIMEOUT_S = 600


@dataclass(frozen=True)
class Tensor:
    """One dumped tensor pair as compared: its dump name, forward pass and decoder layer."""

    name: str
    step: int
    layer_id: int | None
    equal: bool
    max_abs_diff: float | None = None
    why: str = ""  # why a pair differs other than in value (shapes, a tensor against a non-tensor)
    only: Role | None = None  # the side that alone dumped it (no partner on the other)

    @property
    def module(self) -> str | None:
        """The hooked module (`""`: the root model); None for a forward-batch field."""
        m = _HOOKED.fullmatch(self.name)
        return None if m is None else m["module"] or ""

    @property
    def is_output(self) -> bool:
        m = _HOOKED.fullmatch(self.name)
        return m is not None and m["part"] == "output"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "step": self.step, "layer_id": self.layer_id, "equal": self.equal,
                "max_abs_diff": self.max_abs_diff, "why": self.why, "only": self.only and self.only.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tensor:
        return cls(d["name"], int(d["step"]), d.get("layer_id"), bool(d["equal"]), d.get("max_abs_diff"),
                   d.get("why", ""), Role(d["only"]) if d.get("only") else None)


@dataclass(frozen=True)
class Culprit:
    """What the first difference says: `kind` is module, inline, batch, one-side or agree (by
    `culprit`), or, for a whole localization, not-reproduced or nothing-compared."""

    kind: str
    module: str | None  # the module named (module, inline); None otherwise
    inputs: tuple[str, ...]  # its dumped inputs, all agreeing


def culprit(entries: list[Tensor]) -> Culprit:
    """The innermost module whose inputs agree and whose output differs, from the deciding
    forward pass's tensors in order (the last of them the first that differs, if any does)."""
    if not entries or entries[-1].equal:
        return Culprit("agree", None, ())
    *before, first = entries
    if first.only is not None:
        return Culprit("one-side", None, ())
    open_calls: list[tuple[str, list[str]]] = []  # modules entered and not yet left, their inputs
    for t in before:
        if t.module is None:
            continue
        if t.is_output:
            while open_calls and open_calls.pop()[0] != t.module:
                pass
        elif not open_calls or open_calls[-1][0] != t.module:
            open_calls.append((t.module, [t.name]))
        else:
            open_calls[-1][1].append(t.name)
    if first.is_output:
        inputs = next((names for m, names in reversed(open_calls) if m == first.module), [])
        return Culprit("module", first.module, tuple(inputs))
    if first.module is None or not open_calls:  # the batch itself, or the root model's own inputs
        return Culprit("batch", None, ())
    around, inputs = open_calls[-1]
    return Culprit("inline", around, tuple(inputs))


@dataclass(frozen=True)
class Side:
    """One side's dumping server: its revision, argv, log and dump directory (run-relative)."""

    role: Role
    sha: str
    argv: tuple[str, ...]
    log: str
    dumps: str
    files: int

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role.value, "sha": self.sha, "argv": list(self.argv), "log": self.log,
                "dumps": self.dumps, "files": self.files}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Side:
        return cls(Role(d["role"]), d["sha"], tuple(d["argv"]), d["log"], d["dumps"], int(d["files"]))


@dataclass(frozen=True)
class Localization:
    """One row localized: both sides' servers, whether their answers to the reproducer still
    differed there, what was compared, and the culprit."""

    config: str
    probe: str
    target: str
    requests: int
    sides: tuple[Side, ...]
    answers_differ: bool
    compared: int
    not_tensors: int
    entries: tuple[Tensor, ...]  # the deciding forward pass, up to the first difference

    @property
    def row(self) -> str:
        return f"{self.config}/{self.probe}"

    @property
    def culprit(self) -> Culprit:
        if not self.answers_differ:  # the dumps would show a difference the answers do not
            return Culprit("not-reproduced", None, ())
        found = culprit(list(self.entries))
        if found.kind == "agree" and not self.compared:
            return Culprit("nothing-compared", None, ())
        return found

    @property
    def localized(self) -> bool:
        """A difference was found in the dumps (a module, inline code, the batch, one side's
        extra tensor) or they agree where tensors were compared: an answer, not a refusal."""
        return self.culprit.kind not in ("not-reproduced", "nothing-compared")

    def to_dict(self) -> dict[str, Any]:
        c = self.culprit
        return {"config": self.config, "probe": self.probe, "target": self.target, "requests": self.requests,
                "sides": [s.to_dict() for s in self.sides], "answers_differ": self.answers_differ,
                "compared": self.compared,
                "not_tensors": self.not_tensors, "outcome": c.kind, "module": c.module,
                "inputs_agreed": list(c.inputs), "summary": summary(self),
                "entries": [t.to_dict() for t in self.entries]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Localization:
        return cls(d["config"], d["probe"], d["target"], int(d["requests"]),
                   tuple(Side.from_dict(s) for s in d["sides"]), bool(d["answers_differ"]), int(d["compared"]),
                   int(d["not_tensors"]),
                   tuple(Tensor.from_dict(t) for t in d["entries"]))


def _where(t: Tensor) -> str:
    layer = "" if t.layer_id is None else f", layer {t.layer_id}"
    return f"forward pass {t.step}{layer}"


def summary(loc: Localization) -> str:
    """The finding in one sentence."""
    c, first = loc.culprit, loc.entries[-1] if loc.entries else None
    if c.kind == "not-reproduced":
        started = (" (started with CUDA graphs off, as dumping needs: a difference only the run's servers make "
                   "with graphs does not show there)")
        return (f"the reproducer did not differ on the dumping servers{started}: both sides answered its "
                f"{plural(loc.requests, 'request')} alike, nothing to localize")
    if c.kind == "nothing-compared":
        return (f"no tensor was compared ({plural(loc.not_tensors, 'dump')} of something else than a tensor "
                f"skipped): nothing localized")
    if c.kind == "agree" or first is None:
        return (f"the dumps agree ({plural(loc.compared, 'tensor')} compared): the difference is after the last "
                f"dumped module (sampling?)")
    diff = (f", {first.why}" if first.why else
            "" if first.max_abs_diff is None else f", max abs diff {fmt(first.max_abs_diff)}")
    if c.kind == "module":
        agreed = f"its inputs agree ({', '.join(c.inputs)})" if c.inputs else "it has no dumped tensor inputs"
        return f"{c.module or '(root model)'}: {agreed}, its output {first.name} differs ({_where(first)}{diff})"
    if c.kind == "inline":
        return (f"{c.module}'s own code: its inputs agree ({', '.join(c.inputs)}), {first.name}, computed inside it, "
                f"differs ({_where(first)}{diff})")
    if c.kind == "batch":
        return f"the model's inputs differ ({first.name}, {_where(first)}{diff}): the difference is before the model"
    assert first.only is not None  # one-side: the only kind left
    return f"the sides dumped different tensors: only the {first.only.value} dumped {first.name} ({_where(first)})"


def markdown(loc: Localization, shown: Callable[[str], str] = str) -> str:
    """The Markdown section of one localized row (localize.md); `shown`: a server's command line
    as a report shows it (the command passes report.format.portable: no path of this machine)."""
    c = loc.culprit
    lines = [f"### Localized: {md_code(loc.row)}", "",
             f"The row's reproducer ({plural(loc.requests, 'request')}) posted to one server of each side with "
             f"SGLang's tensor dumper on (`DUMPER_NON_INTRUSIVE_MODE=all`); {plural(loc.compared, 'tensor')} "
             f"compared in forward order, bit for bit.", "",
             f"**{'Named' if c.kind in ('module', 'inline') else 'Not localized to a module'}:** {summary(loc)}.", ""]
    agreed = [t for t in loc.entries if t.equal][-AGREED_SHOWN:]
    if agreed and loc.localized and c.kind != "agree":
        lines += ["Agreed just before it:", "",
                  *md_table(["tensor", "forward pass", "layer"],
                            [[md_code(t.name), t.step, "" if t.layer_id is None else t.layer_id] for t in agreed]), ""]
    lines += md_table(["side", "revision", "dumped tensors", "server"],
                      [[s.role.value, md_code(s.sha[:12]), s.files, md_code(shown(shlex.join(s.argv)))] for s in loc.sides])
    return "\n".join(lines) + "\n"


def exact_different_row(result: RunResult, row: str) -> ProbeComparison:
    """The comparison `row` (CONFIG/PROBE) names, if it is an exact *different* with a verified
    reproducer (UsageError otherwise: nothing to localize)."""
    config, _, probe = row.partition("/")
    comp = next((c for c in result.comparisons if c.config == config and c.probe == probe), None)
    if comp is None:
        known = ", ".join(f"{c.config}/{c.probe}" for c in result.comparisons)
        raise UsageError(f"--row {row}: no such row in this run (rows: {known})")
    decided = comp.metrics.get(comp.decided_by or "")
    if comp.verdict != Verdict.DIFFERENT or decided is None or decided.kind != Kind.EXACT:
        raise UsageError(f"--row {row}: reads {comp.verdict.value}, not an exact different: nothing to localize")
    rep = comp.reproducer
    if rep is None or not rep.requests:
        raise UsageError(f"--row {row}: its reproducer has no request to post")
    if len(rep.requests) > REPRODUCER_BUDGET:
        raise UsageError(f"--row {row}: its reproducer lists {plural(len(rep.requests), 'request')}; localize posts "
                         f"at most {REPRODUCER_BUDGET} to a side (the requests a reproducer is verified within by "
                         f"default), and posts none of these")
    if rep.verification is None or not rep.verification.shows:
        said = rep.verification.error or rep.verification.observed if rep.verification else "never posted"
        raise UsageError(f"--row {row}: its reproducer was not verified on servers ({said}): run it again first")
    return comp


def has_dumper_control(target: Target, worktree: Path | None) -> bool:
    """Whether the revision serves `/dumper/{method}` (DUMPER_SERVER_PORT=reuse)."""
    path, mark = DUMPER_CONTROL[target.name]
    source = worktree / path if worktree is not None else None
    return source is not None and source.is_file() and mark in source.read_text(errors="replace")


def graphs_off(target: Target, sha: str, worktree: Path | None, role: Role, timeout_s: float) -> tuple[str, ...]:
    """The revision's flags for CUDA graphs off in every phase, from its `--help` (UsageError
    where it has none: its hooks could not run)."""
    try:
        return revision_capabilities(target, sha, worktree, timeout_s).graphs_off_args()
    except NotExpressible as exc:
        raise UsageError(f"the {role.value} ({sha[:12]}): {exc}: its dumper hooks would not run") from None


def check_dumper(target: Target, worktree: Path | None, role: Role, sha: str) -> None:
    """UsageError unless the revision's dumper hooks modules (SGLang 0.5.16 has it)."""
    path, mark = DUMPER_SOURCE[target.name]
    source = worktree / path if worktree is not None else None
    if source is None or not source.is_file() or mark not in source.read_text(errors="replace"):
        raise UsageError(f"the {role.value} ({sha[:12]}) has no tensor dumper with module hooks ({path}, "
                         f"{mark}): nothing can be localized there")


@dataclass(frozen=True)
class RecordedServer:
    """A cell's recorded server, checked before anything of it runs: its argv (the target's
    module, secrets still `<redacted>` as results.json keeps them) and the environment the
    dumping server gets from it."""

    argv: tuple[str, ...]  # after the interpreter; --host and --port left to `argv_on`
    env: dict[str, str]

    @classmethod
    def checked(cls, target: Target, metadata: dict[str, Any], suite_env: dict[str, str],
                secret_args: dict[str, str]) -> RecordedServer:
        """UsageError for a recorded server localize must not start as it is: another program
        than the target's server, a secret it lacks, a variable a configuration may not set
        from a results file (`configuration_may_set`)."""
        argv = [str(a) for a in metadata.get("server_argv") or []]
        foreign = foreign_server_argv(target.name, argv)
        if foreign:
            raise UsageError(f"{foreign}: {shlex.join(argv[:4])} … is not run")
        for flag in redacted_flags(argv):
            if flag not in secret_args:
                raise UsageError(f"results.json records the server flag {flag} as {REDACTED} (results keep no "
                                 f"secret): pass its value with --secret-arg {flag}=VALUE")
        env = {}
        for name, value in ((str(k), str(v)) for k, v in (metadata.get("server_env") or {}).items()):
            if REDACTED in value:
                if name not in os.environ:
                    raise UsageError(f"results.json records the server's {name} as {REDACTED} (results keep no "
                                     f"secret): export {name} with its value and run localize again")
                continue  # the user's own value, which the server inherits (Target.env)
            if not configuration_may_set(name, value) and suite_env.get(name) != value:
                raise UsageError(f"results.json sets {name}={shlex.quote(value)} for the server, which may change "
                                 f"what code it loads (a results file sets only {', '.join(CONFIG_ENV_NAMES)} and "
                                 f"{'*, '.join(CONFIG_ENV_PREFIXES)}* switches without a path): localize sets it "
                                 f"only as the run's suite does (--suite)")
            env[name] = value
        return cls(tuple(argv), env)

    def argv_on(self, port: int, graphs_off: tuple[str, ...]) -> list[str]:
        """The recorded argv after the interpreter, bound to 127.0.0.1 on `port` (whatever host
        and port it recorded), its graph switches replaced by `graphs_off` (the revision's)."""
        kept: list[str] = []
        words = iter(self.argv)
        for word in words:
            if word in ("--host", "--port", *GRAPH_BACKEND_FLAGS):
                next(words, None)  # its value
            elif not word.startswith(("--host=", "--port=", *(f"{f}=" for f in GRAPH_BACKEND_FLAGS))) \
                    and word not in GRAPH_SWITCHES:
                kept.append(word)
        return [*kept, "--host", HOST, "--port", str(port), *graphs_off]


def redacted_flags(argv: list[str]) -> list[str]:
    """The flags whose recorded value is (or holds) `<redacted>`: `--flag=<redacted>` or
    `--flag <redacted>`; a bare word, the word itself."""
    flags = []
    for i, word in enumerate(argv):
        if REDACTED in word:
            previous = argv[i - 1] if i else ""
            flags.append(word.partition("=")[0] if word.startswith("--") else
                         previous if previous.startswith("--") and "=" not in previous else word)
    return flags


def with_secrets(argv: list[str], secret_args: dict[str, str]) -> list[str]:
    """`argv` with each redacted flag's value the user gave (`--secret-arg FLAG=VALUE`)."""
    out = []
    for i, word in enumerate(argv):
        flag = word.partition("=")[0]
        if REDACTED in word and word.startswith("--") and flag in secret_args:
            out.append(f"{flag}={secret_args[flag]}")
        elif REDACTED in word and i and argv[i - 1] in secret_args:
            out.append(secret_args[argv[i - 1]])
        else:
            out.append(word)
    return out


# What an answer says, as a reproducer's forms read it: its tokens and logprobs, never its timings.
ANSWER_FIELDS = ("input_token_logprobs", "output_token_logprobs", "input_top_logprobs", "output_top_logprobs")


def answered(answers: list[Generation | None]) -> str:
    """One side's answers to the reproducer as comparable text (a NaN is `NaN`: equal to itself)."""
    return json.dumps([None if g is None else [list(g.output_ids), *(g.meta.get(k) for k in ANSWER_FIELDS)]
                       for g in answers], sort_keys=True)


def localize(out_dir: Path, row: str, repo: Path, target: Target, startup_timeout_s: float,
             request_timeout_s: float, suite: Suite | None = None,
             secret_args: dict[str, str] | None = None) -> Localization:
    """Dump both sides' forward passes on the row's reproducer and compare them. `suite`: the
    run's, whose configuration's environment may set what results.json alone may not;
    `secret_args`: the values of the server flags results.json keeps redacted."""
    result = read_run(out_dir)
    comp = exact_different_row(result, row)
    rep = comp.reproducer
    assert rep is not None
    secrets = secret_args or {}
    suite_env = suite.server_config(suite.config(comp.config), target.name).env if suite is not None else {}
    revisions = {Role.BASE: result.base, Role.CANDIDATE: result.candidate}
    servers = {}
    for role in revisions:
        cell = result.cell(comp.config, comp.probe, role)
        if cell is None:
            raise UsageError(f"--row {row}: results.json has no {role.value} cell")
        servers[role] = RecordedServer.checked(target, cell.metadata, suite_env, secrets)
    worktrees, flags = {}, {}
    for role, info in revisions.items():
        worktrees[role] = Revision.resolve(repo, info.sha or info.ref).checkout()
        check_dumper(target, worktrees[role], role, info.sha or info.ref)
        flags[role] = graphs_off(target, info.sha or info.ref, worktrees[role], role, startup_timeout_s)
    # Both sides alike: a side dumping its warm-up would count forward passes the other does not.
    at_requests = all(has_dumper_control(target, worktrees[role]) for role in revisions)
    if not at_requests:
        print(f"detcheck: warning: localize: a revision serves no {DUMPER_CONTROL[target.name][1]} dumper control: "
              f"both sides' dumpers are on from boot, their warm-up passes dumped too", file=sys.stderr)
    here = out_dir / LOCALIZE_DIR / safe_name(f"{comp.config}-{comp.probe}")
    shutil.rmtree(here, ignore_errors=True)  # this row's dumps of an earlier localize
    sides, answers = [], {}
    for role, info in revisions.items():
        server, graph_flags = servers[role], flags[role]
        switch = {"DUMPER_ENABLE": "0", "DUMPER_SERVER_PORT": "reuse"} if at_requests else {"DUMPER_ENABLE": "1"}
        env = {**server.env, **switch, "DUMPER_DIR": str(here), "DUMPER_EXP_NAME": role.value,
               "DUMPER_NON_INTRUSIVE_MODE": "all", "DUMPER_ENABLE_OUTPUT_CONSOLE": "0"}
        log = here / f"{role.value}.log"
        launched = launch(lambda port: [target.python, *with_secrets(server.argv_on(port, graph_flags), secrets)],
                          target.env(worktrees[role], env), log, worktrees[role], startup_timeout_s,
                          TRANSIENT_LAUNCH_FAILURES)
        if launched.failure is not None:
            scrub_file(log, tuple(secrets.values()))  # a server may echo its argv
            raise LaunchError(f"the {role.value}'s dumping server did not start: {launched.failure}",
                              scrub(launched.failure.log_tail, tuple(secrets.values())), launched.failure.exit_code)
        try:
            client = SGLangClient(launched.server.url, timeout_s=request_timeout_s)
            if at_requests:
                client.configure_dumper(enable=True)  # the server stops right after the requests
            answers[role] = answered(post_all(client, rep.requests))
        finally:
            launched.server.stop()
            scrub_file(log, tuple(secrets.values()))  # once it stopped writing: the rewrite is a rename
        dumps = here / role.value
        sides.append(Side(role, info.sha or info.ref, tuple(server.argv_on(REPRODUCER_PORT, graph_flags)),
                          str(log.relative_to(out_dir)), str(dumps.relative_to(out_dir)),
                          len(list(dumps.glob("*.pt"))) if dumps.is_dir() else 0))
    compared = compare(target, here / Role.BASE.value, here / Role.CANDIDATE.value)
    return Localization(comp.config, comp.probe, target.name, len(rep.requests), tuple(sides),
                        answers[Role.BASE] != answers[Role.CANDIDATE], int(compared["compared"]),
                        int(compared["not_tensors"]), tuple(Tensor.from_dict(e) for e in compared["entries"]))


def compare(target: Target, base: Path, cand: Path) -> dict[str, Any]:
    """harness/dumpdiff.py's answer, run by the servers' interpreter (it has torch)."""
    # the harness in front of what the interpreter already imports (SGLang's site: its torch)
    inherited = os.environ.get("PYTHONPATH")
    env = target.env(None, {"PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT), *([inherited] if inherited else [])])})
    proc = subprocess.run([target.python, "-m", "harness.dumpdiff", str(base), str(cand)], capture_output=True,
                          text=True, env=env, cwd=PROJECT_ROOT, timeout=COMPARE_TIMEOUT_S)
    if proc.returncode != 0:
        raise LaunchError(f"comparing the dumps failed (exit {proc.returncode})", proc.stderr[-3000:])
    return json.loads(proc.stdout)


def record(out_dir: Path, loc: Localization, section: Callable[[Localization], str] = markdown) -> None:
    """localize.json (this row's entry replaced, others kept) and localize.md, each row's `section`."""
    path = out_dir / LOCALIZE_FILE
    rows = {}
    if path.exists():
        stored = read_json(path, "localize")
        if stored.get("schema") != SCHEMA:
            raise UsageError(f"{path}: schema {stored.get('schema')}, this detcheck writes {SCHEMA}")
        rows = {f"{r['config']}/{r['probe']}": r for r in stored["rows"]}
    rows[loc.row] = loc.to_dict()
    atomic_write_json(path, {"schema": SCHEMA, "rows": list(rows.values())})
    sections = [section(Localization.from_dict(r)) for r in rows.values()]
    atomic_write_text(out_dir / SECTION_FILE, "\n".join(sections))
