"""A bisect's session: what every evaluation shares (`BisectSpec`, saved for the predicate
`detcheck bisect-step` to load), each commit's judgement (`Evaluation`) and the log they are
appended to, and git's exit codes.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.bounded import RESULT_DOCUMENT, read_file_text
from harness.envs import DEFAULT_BUILD_TIMEOUT_S, DEFAULT_ENV_FILE, EnvOptions
from harness.errors import UsageError
from harness.paths import cache_dir, safe_name
from harness.textfmt import shortened


SAME, DIFFERENT, SKIP, ABORT = 0, 1, 125, 128


SESSION_FILE = "session.json"


LOG_FILE = "evaluations.jsonl"


_LOG_LOCK = threading.Lock()  # k-ary bisect evaluates k commits in threads of one process


@dataclass(frozen=True)
class BisectSpec:
    """What every evaluation of one bisect shares; saved so the predicate can load it."""

    repo: Path
    good: str  # full sha
    suite: Path
    probes: tuple[str, ...]
    configs: tuple[str, ...] = ()
    target: str = "refserver"
    store_root: Path = Path()
    session_dir: Path = Path()
    max_scale: int = 8  # an unknown verdict is measured with more prompts, up to this multiple
    python: str | None = None
    env_options: EnvOptions = EnvOptions()  # every evaluated revision's environment (harness.envs)

    def save(self) -> Path:
        self.session_dir.mkdir(parents=True, exist_ok=True)
        path = self.session_dir / SESSION_FILE
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}
        path.write_text(json.dumps(data, indent=1))
        return path

    @classmethod
    def load(cls, session_dir: Path) -> BisectSpec:
        path = session_dir / SESSION_FILE
        if not path.is_file():
            raise UsageError(f"{session_dir}: no bisect session here ({SESSION_FILE} missing)")
        try:
            d = json.loads(read_file_text(path, RESULT_DOCUMENT))
            # A session saved before environments were threaded through has none: the defaults.
            env = d.pop("env_options", {})
            return cls(**{**d, "repo": Path(d["repo"]), "suite": Path(d["suite"]),
                          "store_root": Path(d["store_root"]), "session_dir": Path(d["session_dir"]),
                          "probes": tuple(d["probes"]), "configs": tuple(d["configs"]),
                          "env_options": EnvOptions(env.get("file", DEFAULT_ENV_FILE),
                                                    tuple(env.get("pip_args", ())),
                                                    env.get("build_timeout_s", DEFAULT_BUILD_TIMEOUT_S))})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSONDecodeError is a ValueError
            raise UsageError(f"{path}: corrupt bisect session file ({type(exc).__name__}: {exc}); "
                             f"run `detcheck bisect` again to start a new session") from None


@dataclass(frozen=True)
class Evaluation:
    """One commit judged against good: what git was told, and whether anything launched."""

    phase: str  # endpoint / step / confirm
    sha: str
    subject: str
    verdict: str  # same / different / unknown / skip / abort
    exit_code: int
    launches: int  # servers started for this commit (0: every cell came from the store)
    scale: int  # prompts multiple of the run that decided
    note: str = ""
    results: str = ""  # the results.json of the run that decided (absent in older logs)

    @property
    def source(self) -> str:
        if self.launches:
            return f"measured ({self.launches} launch{'es' if self.launches > 1 else ''})"
        return "not launched" if self.exit_code in (SKIP, ABORT) else "reused"

    def line(self, label: str) -> str:
        scale = f" ×{self.scale} prompts" if self.scale > 1 else ""
        note = f"  {self.note}" if self.note else ""
        where = f"\n{'':<9} results: {self.results}" if self.results else ""
        return (f"{label:<9} {self.sha[:12]}  {self.verdict:<9} exit {self.exit_code:<3} "
                f"{self.source}{scale}  {shortened(self.subject, 60)!r}{note}{where}")


def session_dir_for(repo: Path, good: str, bad: str) -> Path:
    return cache_dir() / "bisect" / f"{safe_name(repo.name)}-{good[:8]}-{bad[:8]}"


def repo_lock_path(repo: Path) -> Path:
    """The lock a bisect of `repo` holds, named by the repository's real path."""
    real = repo.resolve()
    digest = hashlib.sha256(str(real).encode()).hexdigest()[:12]
    return cache_dir() / "locks" / f"bisect-{safe_name(real.name)}-{digest}.lock"


def read_log(session_dir: Path) -> list[Evaluation]:
    path = session_dir / LOG_FILE
    if not path.is_file():
        return []
    try:
        lines = read_file_text(path, RESULT_DOCUMENT).splitlines()
    except ValueError as exc:  # past the cap, or not UTF-8
        raise UsageError(f"{path}: corrupt bisect log ({exc})") from None
    evaluations = []
    for number, line in enumerate(lines, 1):
        try:
            evaluations += [Evaluation(**json.loads(line))] if line.strip() else []
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{path}:{number}: corrupt bisect log line ({type(exc).__name__}: {exc})") from None
    return evaluations


def append_log(spec: BisectSpec, ev: Evaluation) -> None:
    """One evaluation appended to the session's log (from any of the k threads of a round)."""
    with _LOG_LOCK, open(spec.session_dir / LOG_FILE, "a") as f:
        f.write(json.dumps(asdict(ev)) + "\n")
