"""Slurm: a matrix entry's jobs, or a bisect's rounds, submitted to a Slurm cluster.

**A matrix entry** (`detcheck matrix run ENTRY --slurm`): one Slurm job per (revision,
configuration); a configuration whose probes measure both sides together (an interleaved
noisy probe, a sequential one: `pipeline.plan.both_sides_together`) is one job of both, so that its
rounds still alternate between two servers up at once. Each job runs `python -m harness.slurm
work …` on its node: the entry's slots laid over the GPUs Slurm gave the job (its
CUDA_VISIBLE_DEVICES; `--gres=gpu:N` is asked for an entry with real GPUs), the servers bound
to 127.0.0.1 beside the probes that call them, every cell into the shared store (`--store`: a
filesystem every node sees, as the run directories and the worktree cache must be), the job's
results.json in `<suite out>/slurm/<config>-<side>/`. The collector then merges every job's
cells and launches into one recorder (`merge`): the comparisons are computed by the same code
as a local run's (a two-side job's own comparisons, with their reproducer's verification,
kept), so the verdicts are the local ones; a job that left no results leaves its cells out (the
row reads "no … result") and its log's tail is said. Every job carries its collector's run id
(`--run-id`): a job folder holding another run's results (an earlier run's, its job failing this
time) is not merged, and a merge short of any job's results is not marked complete, so never a
pass (harness/completeness.py).

**A bisect** (`detcheck bisect … --slurm`): the k-ary driver (k = `--slots`, 1 included) with
each round as one Slurm job: one `srun` task per commit of the round (`python -m harness.slurm
evaluate`: `bisect.evaluate` on the node, logged in the session's evaluations.jsonl, which the
driver reads back). The endpoint and the revert confirmation are a one-commit round each.

Every submission is `sbatch --wait`, from a thread of its own (all of them queued at once); an
interrupt cancels them (`scancel`). Slurm exports the caller's environment (`--export=ALL`)
with PYTHONPATH set to this harness, and runs the job from the project root.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.bisect import BisectSpec, Evaluation, evaluate, read_log
from harness.errors import UsageError
from harness.jobs import RunRequest
from harness.matrix import MatrixEntry, load_matrix
from harness.observer import QuietObserver
from harness.paths import PROJECT_ROOT
from harness.suite import load_suite
from harness.probes import known_probes
from harness.recorder import RunRecorder
from harness.result_files import read_run, run_files, write_run
from harness.results import Role, RunResult
from harness.revisions import Revision
from harness.pipeline.plan import both_sides_together, cell_order, plan
from harness.run import execute
from harness.pipeline.slots import entry_slots, suite_gpus_per_server

SLURM_DIR = "slurm"  # under a suite's run directory: one folder per job
BOTH = "both"


@dataclass(frozen=True)
class SlurmOptions:
    """How jobs are submitted: extra sbatch arguments (`--slurm-arg=--partition=gpu`)."""

    args: tuple[str, ...] = ()


def add_slurm_args(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--slurm", action="store_true",
                        help=f"submit {what} to Slurm (sbatch/srun) instead of running them here; the store, "
                             "the run directories and the cache must be on a filesystem the nodes share")
    parser.add_argument("--slurm-arg", action="append", default=[], metavar="ARG",
                        help="extra sbatch argument (repeatable): --slurm-arg=--partition=gpu")


def options_from(args: argparse.Namespace) -> SlurmOptions | None:
    if not getattr(args, "slurm", False):
        if getattr(args, "slurm_arg", None):
            raise UsageError("--slurm-arg needs --slurm")
        return None
    for tool in ("sbatch", "srun"):
        if shutil.which(tool) is None:
            raise UsageError(f"--slurm: `{tool}` is not on PATH (install Slurm's client, e.g. Debian's slurm-client)")
    return SlurmOptions(tuple(args.slurm_arg))


# -- submitting ---------------------------------------------------------------------------------

class Submitter:
    """Thread-safe: `sbatch --wait` of one job at a time per thread; every job still queued or
    running is cancelled by `cancel_all`."""

    def __init__(self, options: SlurmOptions):
        self.options = options
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def run(self, name: str, script: str, log: Path, gpus: int = 0, tasks: int = 1) -> int:
        """The job's exit code (sbatch's, which --wait makes the job's)."""
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = ["sbatch", "--parsable", "--wait", "--job-name", name, "--output", str(log),
                "--chdir", str(PROJECT_ROOT), "--nodes", "1", "--ntasks", str(tasks), "--export", "ALL",
                *(["--gres", f"gpu:{gpus}"] if gpus else []), *self.options.args, "--wrap", script]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        job_id = proc.stdout.readline().strip().split(";")[0]
        with self._lock:
            self._ids.add(job_id)
        _, err = proc.communicate()
        with self._lock:
            self._ids.discard(job_id)
        if not job_id:
            raise UsageError(f"sbatch refused job {name}: {err.strip()[-400:]}")
        return proc.returncode

    def cancel_all(self) -> None:
        with self._lock:
            ids = sorted(self._ids)
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, check=False)


def python_command(*args: str) -> str:
    """This interpreter running this module on the node."""
    return shlex.join([sys.executable, "-m", "harness.slurm", *args])


# -- a matrix entry --------------------------------------------------------------------------------

@dataclass(frozen=True)
class EntryJob:
    """One Slurm job of an entry: a configuration's one side, or both."""

    req: RunRequest
    config: str
    side: str  # "base", "candidate" or BOTH
    gpus: int  # the GPUs the job holds (modelled or real)

    @property
    def out(self) -> Path:
        return self.req.out_dir / SLURM_DIR / f"{self.config}-{self.side}"

    @property
    def name(self) -> str:
        return f"detcheck-{self.req.suite_path.stem}-{self.config}-{self.side}"


def entry_jobs(entry: MatrixEntry, reqs: tuple[RunRequest, ...]) -> list[EntryJob]:
    """Every suite's jobs in plan order: a configuration's sides as a job each, or both in one."""
    suites = [load_suite(req.suite_path, known_probes(), req.overrides) for req in reqs]
    per_server = entry.gpus_per_server or suite_gpus_per_server(suites, entry.target or "", entry.server_args)
    jobs = []
    for req, suite in zip(reqs, suites):
        for cp in plan(suite, req):
            if both_sides_together(suite, cp):
                jobs.append(EntryJob(req, cp.spec.name, BOTH, entry.gpus))
            else:
                jobs += [EntryJob(req, cp.spec.name, role.value, min(per_server, entry.gpus)) for role in Role]
    return jobs


def run_entry(entry: MatrixEntry, matrix_path: Path, reqs: tuple[RunRequest, ...], options: SlurmOptions,
              say=lambda line: print(line, file=sys.stderr)) -> list[RunResult]:
    """Each suite's result, its jobs run on Slurm and merged; results.json written per suite.
    Each suite's run gets its id here, and its jobs carry it: a job folder that still holds an
    earlier run's results (its job failed this time) is never merged as this run's."""
    reqs = tuple(dataclasses.replace(req, run_id=req.run_id or uuid.uuid4().hex) for req in reqs)
    jobs = entry_jobs(entry, reqs)
    say(f"slurm: {len(jobs)} jobs for {entry.name} ({sum(j.side == BOTH for j in jobs)} of both sides, "
        f"the others one side each), all queued at once")
    submitter = Submitter(options)
    with ThreadPoolExecutor(max(1, len(jobs)), thread_name_prefix="slurm") as pool:
        try:
            codes = list(pool.map(lambda job: _submit_entry_job(submitter, entry, matrix_path, job), jobs))
        except BaseException:
            submitter.cancel_all()
            raise
    for job, code in zip(jobs, codes):
        if code != 0 or not run_files(job.out):
            say(f"slurm: job {job.name} exited {code}; its log ends: {_tail(job.out / 'slurm.log')}")
    results = []
    for req in reqs:
        mine = [job for job in jobs if job.req is req]
        done, refused = [], []
        for job in mine:
            found = read_run(job.out) if run_files(job.out) else None
            why = "left no results" if found is None else not_this_run(found, req)
            if found is None or why is not None:
                refused.append(f"{job.name}: {why}")
            else:
                done.append((job, found))
        for line in refused:
            say(f"slurm: not merged: {line}")
        result = merge(req, done, refused)
        write_run(req.out_dir, result)
        results.append(result)
    return results


def not_this_run(result: RunResult, req: RunRequest) -> str | None:
    """Why a job's results are not a finished job of `req`'s run (another run's, left in its
    folder; one the job never finished), or None."""
    if result.plan is None or result.plan.run_id != req.run_id:
        theirs = result.plan.run_id[:12] if result.plan is not None else "none"
        return (f"its results are another run's (run id {theirs}, this run's {str(req.run_id)[:12]}; "
                f"finished {result.metadata.get('finished_at', '?')})")
    if not result.plan.complete:
        return "its run did not finish (its record is not marked complete)"
    return None


def _submit_entry_job(submitter: Submitter, entry: MatrixEntry, matrix_path: Path, job: EntryJob) -> int:
    req = job.req
    args = ["work", "--matrix", str(matrix_path.resolve()), "--entry", entry.name, "--gpus", str(job.gpus),
            "--suite", str(req.suite_path.resolve()), "--target", req.target, "--config", job.config,
            "--side", job.side, "--store", str(req.store_root.resolve()), "--out", str(job.out.resolve()),
            "--run-id", str(req.run_id),
            *(["--fresh"] if req.fresh else [])]
    for role in Role:
        rev = req.revision(role)
        args += [f"--{role.value}", rev.sha or "", f"--{role.value}-ref", rev.ref, "--repo", str(rev.repo)]
    modelled = entry.modelled or entry.gpus == 0
    return submitter.run(job.name, python_command(*args), job.out / "slurm.log", gpus=0 if modelled else job.gpus)


def merge(req: RunRequest, done: list[tuple[EntryJob, RunResult]], refused: list[str] | None = None) -> RunResult:
    """The suite's result from its jobs' results: every job's cells of its own configuration and
    its launches, in plan order, compared as a local run compares them (a two-side job's own
    comparisons kept: they carry its verified reproducers). Marked complete only where no job
    was `refused` (left no results of this run, said in words)."""
    suite = load_suite(req.suite_path, known_probes(), req.overrides)
    plans = plan(suite, req)
    recorder = RunRecorder(suite, req, cell_order(plans))
    quiet = QuietObserver()
    for job, result in done:
        sides = set(Role) if job.side == BOTH else {Role(job.side)}
        for cell in result.cells:
            if cell.config == job.config and cell.role in sides:
                recorder.add(cell, reused=bool(cell.metadata.get("reused")), observer=quiet)
        recorder.adopt([launch for launch in result.launches if launch.config == job.config and launch.role in sides],
                       [c for c in result.comparisons if c.config == job.config] if job.side == BOTH else [])
    merged = recorder.result(partial=False, complete=not refused)
    return dataclasses.replace(merged, metadata={**merged.metadata, "slurm": {
        "jobs": [{"config": job.config, "side": job.side, "gpus": job.gpus, "results": str(job.out)} for job, _ in done],
        **({"not_merged": refused} if refused else {}),
        "nodes": sorted({str(c.metadata.get("machine", "")) for c in merged.cells} - {""})}})


def _tail(path: Path, lines: int = 6) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:]) or "(empty)"
    except OSError:
        return "(no log)"


def work(args: argparse.Namespace) -> int:
    """One entry job on its node: the run of one configuration's side (or both) with the
    entry's server args and environment, its slots over the job's GPUs."""
    entry = load_matrix(args.matrix).entry(args.entry)
    entry = dataclasses.replace(entry, gpus=args.gpus, target=args.target)
    suite = load_suite(args.suite, known_probes())
    per_server = entry.gpus_per_server or suite_gpus_per_server([suite], args.target, entry.server_args)
    slots = entry_slots(entry, os.environ.get("CUDA_VISIBLE_DEVICES"), None, per_server)

    def revision(role: Role) -> Revision:
        return dataclasses.replace(Revision.resolve(args.repo, getattr(args, role.value)),
                                   ref=getattr(args, f"{role.value}_ref"))

    req = RunRequest(suite_path=args.suite, target=args.target, base=revision(Role.BASE),
                     candidate=revision(Role.CANDIDATE), out_dir=args.out, store_root=args.store,
                     fresh=args.fresh, only_configs=(args.config,), extra_args=entry.server_args,
                     extra_env=entry.env, slots=slots,
                     sides=tuple(Role) if args.side == BOTH else (Role(args.side),), run_id=args.run_id,
                     command_line=f"detcheck matrix run {entry.name} --slurm (job {args.config} {args.side})")
    execute(req)
    return 0


# -- a bisect ------------------------------------------------------------------------------------

class BisectRounds:
    """`bisect`'s round evaluator on Slurm: a round is one job of one srun task per commit."""

    def __init__(self, options: SlurmOptions):
        self.submitter = Submitter(options)
        self.rounds = 0

    def __call__(self, spec: BisectSpec, shas: list[str], phase: str, slots: int) -> list[Evaluation]:
        self.rounds += 1
        steps = [python_command("evaluate", "--session", str(spec.session_dir), "--commit", sha,
                                "--phase", phase, "--slots", str(slots)) for sha in shas]
        # one task per commit, each its own step of the job's allocation, at once
        script = " ".join(f"srun --exact --nodes 1 --ntasks 1 {step} &" for step in steps) + " wait"
        log = spec.session_dir / SLURM_DIR / f"job-{self.rounds}-{phase}.log"
        try:
            code = self.submitter.run(f"detcheck-bisect-{phase}-{self.rounds}", script, log, tasks=len(shas))
        except BaseException:
            self.submitter.cancel_all()
            raise
        logged = {(e.phase, e.sha): e for e in read_log(spec.session_dir)}  # the last of each
        missing = [sha for sha in shas if (phase, sha) not in logged]
        if missing:
            raise UsageError(f"slurm: bisect round {self.rounds} (job exit {code}) left no evaluation of "
                             f"{', '.join(s[:12] for s in missing)}; its log ends: {_tail(log)}")
        return [logged[(phase, sha)] for sha in shas]


def evaluate_on_node(args: argparse.Namespace) -> int:
    ev = evaluate(BisectSpec.load(args.session), args.commit, phase=args.phase, slots=args.slots)
    print(ev.line(args.phase), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.slurm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", required=True)
    w = verbs.add_parser("work", help="one matrix entry job, on its node")
    w.add_argument("--matrix", type=Path, required=True)
    w.add_argument("--entry", required=True)
    w.add_argument("--gpus", type=int, required=True)
    w.add_argument("--suite", type=Path, required=True)
    w.add_argument("--target", required=True)
    w.add_argument("--config", required=True)
    w.add_argument("--side", choices=[*(r.value for r in Role), BOTH], required=True)
    w.add_argument("--store", type=Path, required=True)
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--repo", type=Path, required=True)
    w.add_argument("--fresh", action="store_true")
    w.add_argument("--run-id", required=True, help="the collecting run's id: its results carry it")
    for role in Role:
        w.add_argument(f"--{role.value}", required=True)
        w.add_argument(f"--{role.value}-ref", required=True)
    w.set_defaults(func=work)
    e = verbs.add_parser("evaluate", help="one bisect evaluation, on its node")
    e.add_argument("--session", type=Path, required=True)
    e.add_argument("--commit", required=True)
    e.add_argument("--phase", required=True)
    e.add_argument("--slots", type=int, default=1)
    e.set_defaults(func=evaluate_on_node)
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"detcheck slurm: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
