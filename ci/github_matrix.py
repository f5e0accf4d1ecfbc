"""`nox -l --json -t matrix` on stdin → a GitHub Actions `matrix=<json>` output line.

Each validate(<job>) session (a matrix.toml entry, or one partition of its suites) carries its
runner label (`runner` in matrix.toml, else SGLang's `{n}-gpu-{hw}` form: `2-gpu-h200`) and its
estimated seconds (`est_time`, declared or from the entry's stored runs) in its call_spec. A row
per session by default; `--jobs LABEL=N` packs the sessions of one label into at most N jobs
of about equal estimated time, longest-processing-time first, as SGLang's CI splits a suite over
its runners (`--jobs cpu=1`: every CPU entry in one job). CPU sessions (label `cpu`) run on a
hosted runner, the others on self-hosted runners with that label.

    nox -l --json -t matrix | python ci/github_matrix.py [--jobs 1-gpu-h200=2] >> "$GITHUB_OUTPUT"
    printf '%s' "$MATRIX" | python ci/github_matrix.py --check-runs runs    # every job left a run
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.estimates import lpt_partition  # noqa: E402  (standard library + harness only)

HOSTED = "ubuntu-latest"
CPU_LABEL = "cpu"


def runs_on(label: str) -> str | list[str]:
    return HOSTED if label == CPU_LABEL else ["self-hosted", label]


def label_of(session: dict) -> str:
    spec = session["call_spec"]
    if spec.get("runner"):
        return spec["runner"]
    return CPU_LABEL if "cpu" in session["tags"] else spec["entry"]


def job_id(session: dict) -> str:
    """`validate(h200x1-1of2)` → `h200x1-1of2`: the entry, or its partition."""
    name = session["session"]
    return name[name.index("(") + 1:-1] if "(" in name else session["call_spec"]["entry"]


def rows(sessions: list[dict], jobs: dict[str, int] | None = None) -> list[dict]:
    """One row per session, or per pack of a label's sessions where `jobs` names the label."""
    by_label: dict[str, list[dict]] = {}
    for s in sessions:
        by_label.setdefault(label_of(s), []).append(s)
    out = []
    for label, group in by_label.items():
        estimates = [s["call_spec"].get("est_time") for s in group]
        packs = lpt_partition(group, estimates, jobs[label]) if jobs and label in jobs else [[s] for s in group]
        for pack in packs:
            times = [s["call_spec"].get("est_time") for s in pack]
            out.append({"entry": "+".join(job_id(s) for s in pack),
                        "jobs": [job_id(s) for s in pack],
                        "runner": runs_on(label), "label": label,
                        "est_time": None if any(t is None for t in times) else round(sum(times), 1)})
    return out


def parse_jobs(values: list[str]) -> dict[str, int]:
    jobs = {}
    for value in values:
        label, _, count = value.partition("=")
        if not label or not count.isdigit() or int(count) < 1:
            raise SystemExit(f"--jobs {value!r}: expected LABEL=N with N >= 1")
        jobs[label] = int(count)
    return jobs


RESULT_FILES = ("results.json", "results.json.gz", "results.json.xz")


def missing_runs(matrix: dict, runs: Path) -> list[str]:
    """The jobs of `matrix` (this script's output, `{"include": rows}`) that left no run under
    `runs` (the downloaded artifacts: runs/detcheck-<row entry>/<job>/<suite>/results.json)."""
    missing = []
    for row in matrix["include"]:
        for job in row["jobs"]:
            found = [f for name in RESULT_FILES for f in (runs / f"detcheck-{row['entry']}" / job).glob(f"*/{name}")]
            if not found:
                missing.append(job)
    return missing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", action="append", default=[], metavar="LABEL=N",
                   help="pack this label's sessions into at most N jobs by estimated time")
    p.add_argument("--check-runs", type=Path, default=None, metavar="DIR",
                   help="read the matrix this script wrote (its JSON) on stdin instead, and exit 1 naming "
                        "each job that left no run under DIR (the downloaded artifacts)")
    args = p.parse_args(argv)
    if args.check_runs is not None:
        missing = missing_runs(json.load(sys.stdin), args.check_runs)
        for job in missing:
            print(f"detcheck matrix: job {job}: no run under {args.check_runs} (it failed before writing one, "
                  f"or never ran)", file=sys.stderr)
        return 1 if missing else 0
    print("matrix=" + json.dumps({"include": rows(json.load(sys.stdin), parse_jobs(args.jobs))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
