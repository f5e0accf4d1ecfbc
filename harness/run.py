"""The pipeline: suite + revisions → one server per (configuration, revision) → verdicts.

    plan      configurations × revisions, each probe's workload and store key
    reuse     cells already in the store need no server
    checkout  the revision's worktree, and its `--help` (capabilities)
    launch    one server per (configuration, revision), every probe of it on that server
    store     each cell as soon as it exists (a crash loses at most the cell in flight)
    compare   base vs candidate per (configuration, probe)
    report    results.json (+ the renderers, called by the CLI)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from harness import __version__
from harness.capabilities import Capabilities, NotExpressible
from harness.client import ConnectionLost, SGLangClient
from harness.compare import compare_run
from harness.errors import LaunchError, ProbeNotApplicable, ServerError, UsageError, VacuousResult
from harness.metadata import host_metadata, interpreter_metadata
from harness.plan import ConfigSpec, ServerConfig, Suite, WorkloadSpec, check_reserved, load_suite
from harness.probes import PROBES, ProbeContext, known_probes
from harness.results import CellResult, Launch, ProbeOutput, Role, RunResult, Status
from harness.revisions import Revision, cache_dir
from harness.server import ServerProcess, exit_text, free_port, stop_all
from harness.store import CellKey, ResultStore, atomic_write_json, params_fingerprint
from harness.targets import REJECTION, Target, get_target, redact_argv, redact_env, scrub_secrets
from harness.observer import QuietObserver, RunObserver
from harness.workloads import Workload, build as build_workload

RESULTS_FILE = "results.json"


@dataclass(frozen=True)
class RunRequest:
    suite_path: Path
    target: str
    base: Revision
    candidate: Revision
    out_dir: Path
    store_root: Path
    fresh: bool = False
    python: str | None = None
    only_configs: tuple[str, ...] = ()
    only_probes: tuple[str, ...] = ()
    # Extra server environment per role, e.g. CUDA_VISIBLE_DEVICES on a multi-GPU entry.
    role_env: dict[Role, dict[str, str]] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    # Extra server environment for every configuration (part of its fingerprint, unlike role_env).
    extra_env: dict[str, str] = field(default_factory=dict)
    command_line: str = ""
    # Base and candidate servers at the same time (an entry with a GPU set per role); the
    # observer must then be thread-safe (QuietObserver is).
    parallel_roles: bool = False
    # Prompts per workload × this: bisect re-measures an *unknown* verdict with more samples.
    workload_scale: int = 1


@dataclass(frozen=True)
class ConfigPlan:
    spec: ConfigSpec
    server: ServerConfig
    probes: tuple[str, ...]
    workloads: dict[str, Workload]


def plan(suite: Suite, req: RunRequest) -> tuple[ConfigPlan, ...]:
    specs = [suite.config(n) for n in req.only_configs] if req.only_configs else list(suite.configs)
    check_reserved(req.extra_args, "--server-arg")
    for p in req.only_probes:
        if p not in known_probes():
            raise UsageError(f"unknown probe {p!r} (known: {', '.join(sorted(known_probes()))})")
    plans = []
    for spec in specs:
        probes = tuple(p for p in spec.probes if not req.only_probes or p in req.only_probes)
        if not probes:
            continue
        server = suite.server_config(spec, req.target)
        if req.extra_args:
            server = dataclasses.replace(server, args=(*server.args, *req.extra_args))
        if req.extra_env:
            server = dataclasses.replace(server, env={**server.env, **req.extra_env})
        workloads = {p: build_workload(_scaled(suite.workload.with_overrides(suite.probe_spec(p).params),
                                               req.workload_scale))
                     for p in probes}
        plans.append(ConfigPlan(spec, server, probes, workloads))
    if not plans:
        raise UsageError(f"{suite.path}: nothing to run after --config/--probe filters")
    return tuple(plans)


def role_order(index: int) -> tuple[Role, Role]:
    """Alternate which side goes first, so drift over a run does not favour one side."""
    return (Role.BASE, Role.CANDIDATE) if index % 2 == 0 else (Role.CANDIDATE, Role.BASE)


def execute(req: RunRequest, observer: RunObserver | None = None) -> RunResult:
    observer = observer or QuietObserver()
    suite = load_suite(req.suite_path, known_probes())
    plans = plan(suite, req)
    runner = CellRunner(suite, req, get_target(req.target, req.python), ResultStore(req.store_root),
                        observer)
    # Check both revisions out before any launch: a bad ref or an unwritable worktree
    # directory is bad input (exit 2), not a failure discovered half way through a suite.
    req.base.checkout()
    req.candidate.checkout()
    runner.check_outputs(plans)
    observer.begin(sum(2 * len(p.probes) for p in plans))
    try:
        for i, cp in enumerate(plans):
            if req.parallel_roles:
                runner.run_roles_at_once(cp, role_order(i))
                runner.save_partial()
                continue
            for role in role_order(i):
                runner.run_config(cp, role)
                runner.save_partial()
    except BaseException:  # Ctrl-C / SIGTERM: what finished is on disk for `run --resume`
        runner.save_partial()
        raise
    finally:
        observer.end()
    result = runner.result(plans)
    save_result(req.out_dir, result)
    return result


def save_result(out_dir: Path, result: RunResult) -> Path:
    path = out_dir / RESULTS_FILE
    atomic_write_json(path, result.to_dict())
    return path


class CellRunner:
    """Runs configurations on revisions and collects cells and launches."""

    def __init__(self, suite: Suite, req: RunRequest, target: Target, store: ResultStore,
                 observer: RunObserver):
        self.suite, self.req, self.target, self.store, self.observer = suite, req, target, store, observer
        self.cells: list[CellResult] = []
        self.launches: list[Launch] = []
        self.host = host_metadata()
        self._interp: dict[str | None, dict] = {}
        self.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def revision(self, role: Role) -> Revision:
        return self.req.base if role == Role.BASE else self.req.candidate

    def run_roles_at_once(self, cp: ConfigPlan, roles: tuple[Role, ...]) -> None:
        """Each role in its own thread; an interrupt stops every server in flight first."""
        with ThreadPoolExecutor(len(roles)) as pool:
            futures = [pool.submit(self.run_config, cp, role) for role in roles]
            try:
                for f in futures:
                    f.result()
            except BaseException:
                stop_all()
                raise

    # -- one configuration on one revision ---------------------------------------------
    def run_config(self, cp: ConfigPlan, role: Role) -> None:
        rev = self.revision(role)
        keys = {p: self._key(cp, p, rev) for p in cp.probes}
        todo = []
        for probe in cp.probes:
            stored = None if (self.req.fresh or keys[probe] is None) else self.store.get(keys[probe])
            if stored is not None:
                self._add(stored.with_role(role), reused=True)
            else:
                todo.append(probe)
        if not todo:
            return
        try:
            worktree = rev.checkout()
            caps = self._capabilities(rev, worktree)
            feature_args = caps.feature_args(cp.server.features, cp.server.draft_model)
            probe_args = tuple(a for p in todo for a in PROBES[p].server_args)
            caps.check_args((*cp.server.args, *probe_args))
        except NotExpressible as exc:
            self._finish_all(cp, role, todo, keys, Status.NOT_APPLICABLE, f"n/a at this revision: {exc}")
            return
        except (LaunchError, UsageError) as exc:
            self._finish_all(cp, role, todo, keys, Status.ERROR, str(exc),
                             getattr(exc, "log_tail", ""))
            return
        env = {**cp.server.env, **self.req.role_env.get(role, {})}
        self._serve(cp, role, rev, worktree, feature_args + _dedupe(probe_args), env, todo, keys)

    def _serve(self, cp: ConfigPlan, role: Role, rev: Revision, worktree: Path | None,
               args: tuple[str, ...], env: dict[str, str], todo: list[str], keys: dict) -> None:
        """Launch once, run every pending probe, store each cell at once; always stop the server."""
        log_path = self.req.out_dir / "logs" / f"{_safe(cp.spec.name)}-{role.value}-{rev.short()}.log"
        on_tick = self.observer.launching(cp.spec.name, role.value, rev.ref)
        server: ServerProcess | None = None
        try:
            server, launch_exc = self._launch(cp, worktree, args, env, log_path, on_tick)
            launch = Launch(cp.spec.name, role, rev.sha, server.port, server.startup_s,
                            launch_exc is None, tuple(_display_argv(server.argv)))
            self.launches.append(launch)
            self.observer.launched(launch)
            meta = self._metadata(rev, worktree, env, server, launch)
            if launch_exc is not None:
                status, reason = _launch_failure(launch_exc)
                for probe in todo:
                    self._store(keys[probe], self._cell(cp, role, rev, probe, status, reason,
                                                        launch_exc.log_tail, meta))
                return
            client = SGLangClient(server.url, timeout_s=self.suite.request_timeout_s)
            info = _safe_call(client.server_info) or {}
            meta = {**meta, "server_version": info.get("version"),
                    "max_total_num_tokens": info.get("max_total_num_tokens")}
            for probe in todo:
                self._store(keys[probe], self._probe(cp, role, rev, probe, client, server, info, meta))
        finally:
            if server is not None:
                server.stop()

    def _launch(self, cp: ConfigPlan, worktree: Path | None, args: tuple[str, ...], env: dict[str, str],
                log_path: Path, on_tick) -> tuple[ServerProcess, LaunchError | None]:
        """Start and wait for health; a port taken between choosing and binding gets another try."""
        server, launch_exc = None, None
        tries = 3
        for _attempt in range(tries):
            if server is not None:
                server.stop()
            port = free_port()
            argv = self.target.launch_argv(cp.server, args, port)
            server = ServerProcess(argv, self.target.env(worktree, env), log_path, port, cwd=worktree)
            try:
                server.start()
                server.wait_healthy(self.suite.startup_timeout_s, on_tick=on_tick)
                return server, None
            except LaunchError as exc:
                launch_exc = exc
                if "address already in use" not in f"{exc}\n{exc.log_tail}".lower():
                    break
            except BaseException:  # Ctrl-C / SIGTERM while waiting: leave no server behind
                server.stop()
                raise
        else:
            launch_exc = LaunchError(f"{launch_exc}, on each of {tries} ports tried (address already "
                                     f"in use)", launch_exc.log_tail, launch_exc.exit_code)
        assert server is not None
        server.stop()
        return server, launch_exc

    def _probe(self, cp: ConfigPlan, role: Role, rev: Revision, probe: str, client: SGLangClient,
               server: ServerProcess, info: dict, meta: dict) -> CellResult:
        if not server.alive():
            return self._cell(cp, role, rev, probe, Status.ERROR,
                              f"server {exit_text(server.proc.poll())} before this probe",
                              server.log_tail(), meta)
        ctx = ProbeContext(client=client, server=server, config=cp.server, workload=cp.workloads[probe],
                           params=self.suite.probe_spec(probe).params, server_info=info,
                           advance=self.observer.probing(cp.spec.name, role.value, probe))
        t0 = time.time()
        try:
            output = PROBES[probe].run(ctx)
        except ProbeNotApplicable as exc:
            return self._cell(cp, role, rev, probe, Status.NOT_APPLICABLE, f"n/a: {exc}", "", meta)
        except VacuousResult as exc:
            return self._cell(cp, role, rev, probe, Status.ERROR, f"vacuous: {exc}", "", meta)
        except (ServerError, ValueError) as exc:
            dying_s = 0.5 if isinstance(exc, ConnectionLost) else 0.0
            return self._cell(cp, role, rev, probe, Status.ERROR, f"{exc}{_died(server, dying_s)}",
                              server.log_tail(), meta)
        except Exception as exc:  # whatever a malformed answer breaks fails this cell, not the suite
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            reason = (f"probe failed: {type(exc).__name__}: {exc} "
                      f"(at {Path(frame.filename).name}:{frame.lineno}){_died(server)}")
            return self._cell(cp, role, rev, probe, Status.ERROR, reason, server.log_tail(), meta)
        meta = {**meta, "probe_wall_s": round(time.time() - t0, 3)}
        return self._cell(cp, role, rev, probe, Status.OK, "", server.log_tail(12), meta, output)

    # -- helpers ---------------------------------------------------------------------
    def _key(self, cp: ConfigPlan, probe: str, rev: Revision) -> CellKey | None:
        if rev.sha is None:
            return None  # an installed package has no identity to cache by
        return CellKey(self.target.name, rev.sha, cp.server.fingerprint,
                       cp.workloads[probe].fingerprint, probe,
                       params_fingerprint(PROBES[probe].measured(self.suite.probe_spec(probe).params)))

    def _sha_cache(self, kind: str, rev: Revision, suffix: str) -> Path | None:
        """Where a per-revision fact (--help text, interpreter metadata) is kept; None when the
        revision has no sha to key it by (an installed package)."""
        return cache_dir() / kind / f"{self.target.name}-{rev.sha}{suffix}" if rev.sha else None

    def _capabilities(self, rev: Revision, worktree: Path | None) -> Capabilities:
        cache = self._sha_cache("help", rev, ".txt")
        if cache is not None and cache.is_file():
            return Capabilities.parse(cache.read_text())
        code, text = self.target.read_help(worktree, {})
        if code != 0:
            raise LaunchError(f"`{self.target.module} --help` failed with exit code {code}",
                              "\n".join(text.splitlines()[-30:]), exit_code=code)
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(text)
        return Capabilities.parse(text)

    def _interpreter_metadata(self, rev: Revision, worktree: Path | None) -> dict:
        """torch/CUDA/GPU as the server's interpreter sees them: a subprocess that imports torch
        (seconds), so it is kept per (interpreter, sha) like the --help text."""
        interpreter = hashlib.sha256(self.target.python.encode()).hexdigest()[:8]
        cache = self._sha_cache("meta", rev, f"-{interpreter}.json")
        if cache is not None and cache.is_file():
            try:
                return json.loads(cache.read_text())
            except json.JSONDecodeError:
                pass  # a torn write from an interrupted run: collect it again
        meta = interpreter_metadata(self.target.python, self.target.env(worktree, {}))
        if cache is not None and meta:
            atomic_write_json(cache, meta)
        return meta

    def _metadata(self, rev: Revision, worktree: Path | None, env: dict[str, str],
                  server: ServerProcess, launch: Launch) -> dict:
        if rev.sha not in self._interp:
            self._interp[rev.sha] = self._interpreter_metadata(rev, worktree)
        return {**self.host, **self._interp[rev.sha], "target": self.target.name,
                "server_argv": list(launch.args), "server_env": redact_env(env),
                "startup_s": round(server.startup_s, 3), "port": server.port,
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def _cell(self, cp: ConfigPlan, role: Role, rev: Revision, probe: str, status: Status, reason: str,
              log_tail: str, meta: dict, output: ProbeOutput | None = None) -> CellResult:
        meta = {**meta, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "workload": cp.workloads[probe].spec.to_dict(), "workload_name": cp.workloads[probe].name}
        # What the server saw (the caller's environment, then the configuration's, which already
        # holds a matrix entry's) must not come back through its own output.
        secrets = {**os.environ, **cp.server.env}
        return CellResult(
            config=cp.spec.name, probe=probe, role=role, revision=rev.info, status=status,
            config_fingerprint=cp.server.fingerprint, workload_fingerprint=cp.workloads[probe].fingerprint,
            samples=output.samples if output else (), metrics=output.metrics if output else (),
            facts=output.facts if output else {},
            reason=scrub_secrets(reason, secrets), log_tail=scrub_secrets(log_tail, secrets),
            metadata=meta)

    def _finish_all(self, cp: ConfigPlan, role: Role, todo: list[str], keys: dict, status: Status,
                    reason: str, log_tail: str = "") -> None:
        rev = self.revision(role)
        meta = {**self.host, "target": self.target.name}
        for probe in todo:
            self._store(keys[probe], self._cell(cp, role, rev, probe, status, reason, log_tail, meta))

    def _store(self, key: CellKey | None, cell: CellResult) -> None:
        if key is not None:
            self.store.put(key, cell)
        self._add(cell, reused=False)

    def _add(self, cell: CellResult, reused: bool) -> None:
        self.cells.append(cell)
        self.observer.cell_done(cell, reused)

    def result(self, plans: tuple[ConfigPlan, ...] = ()) -> RunResult:
        order = [(cp.spec.name, p) for cp in plans for p in cp.probes] or _order_of(self.cells)
        return RunResult(
            suite=self.suite.name, target=self.target.name,
            base=self.req.base.info, candidate=self.req.candidate.info,
            cells=tuple(self.cells),
            comparisons=compare_run(self.cells, self.suite.probe_params, order),
            launches=tuple(self.launches),
            metadata={**self.host, "suite_path": str(self.suite.path), "command": self.req.command_line,
                      "started_at": self.started, "harness_version": __version__,
                      "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        )

    def save_partial(self) -> None:
        save_result(self.req.out_dir, self.result())

    def check_outputs(self, plans: tuple[ConfigPlan, ...]) -> None:
        """Before any launch: results can be written, and every stored cell the plan would
        reuse reads back (a damaged one is reported with its path, not found half way)."""
        for what, path in (("--out", self.req.out_dir), ("--store", self.store.root)):
            try:
                path.mkdir(parents=True, exist_ok=True)
                tempfile.TemporaryFile(dir=path).close()
            except OSError as exc:
                raise UsageError(f"{what} {path} is not writable: {exc.strerror or exc}") from None
        if self.req.fresh:
            return
        for cp in plans:
            for rev in (self.req.base, self.req.candidate):
                for probe in cp.probes:
                    key = self._key(cp, probe, rev)
                    if key is not None:
                        self.store.get(key)


def _died(server: ServerProcess, dying_s: float = 0.0) -> str:
    """` (server was killed by SIGKILL)` once it is gone; one that dropped the connection gets
    `dying_s` to finish exiting, so its exit is reported rather than raced."""
    try:
        code = server.proc.wait(timeout=dying_s)
    except subprocess.TimeoutExpired:
        return ""
    return f" (server {exit_text(code)})"


def _launch_failure(exc: LaunchError) -> tuple[Status, str]:
    """A revision refusing a combination is n/a (a result); anything else is an error."""
    match = next((line for line in exc.log_tail.splitlines() if REJECTION.search(line)), None)
    if match and exc.exit_code is not None:
        return Status.NOT_APPLICABLE, f"n/a at this revision: rejected at launch: {match.strip()[-240:]}"
    return Status.ERROR, f"launch failed: {exc}"


def _scaled(spec: WorkloadSpec, factor: int) -> WorkloadSpec:
    return spec if factor == 1 else dataclasses.replace(spec, prompts=spec.prompts * factor)


def _order_of(cells: list[CellResult]) -> list[tuple[str, str]]:
    seen: dict[tuple[str, str], None] = {}
    for c in cells:
        seen.setdefault((c.config, c.probe), None)
    return list(seen)


def _dedupe(args: tuple[str, ...]) -> tuple[str, ...]:
    """Probe flags are a union; keep the first occurrence of each flag and its value."""
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(args):
        flag = args[i]
        has_value = i + 1 < len(args) and not args[i + 1].startswith("--")
        if flag not in seen:
            seen.add(flag)
            out += [flag, args[i + 1]] if has_value else [flag]
        i += 2 if has_value else 1
    return tuple(out)


def _display_argv(argv) -> list[str]:
    """The argv as recorded: interpreter path dropped (it differs per machine), secrets masked."""
    return redact_argv(list(argv[1:]))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _safe_call(fn):
    try:
        return fn()
    except ServerError:
        return None
