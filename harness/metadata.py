"""Where a result was measured: machine, GPU, driver, torch, server version.

Collected once per revision by running the server's own interpreter (the harness does not
import torch or SGLang). Missing tools give missing keys, never errors.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
import time
from pathlib import Path

from harness import __version__
from harness.paths import sha_cache_file
from harness.result_files import atomic_write_json
from harness.targets import Target

_PROBE = r"""
import json, importlib
out = {}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["gpu_count"] = torch.cuda.device_count()
except Exception as exc:
    out["torch_error"] = type(exc).__name__
for mod in ("sglang", "refserver"):
    try:
        spec = importlib.util.find_spec(mod)
    except Exception:
        spec = None
    if spec is not None:
        out[mod + "_path"] = list(spec.submodule_search_locations or [spec.origin])[0]
print(json.dumps(out))
"""


def host_metadata() -> dict[str, object]:
    meta: dict[str, object] = {
        "harness_version": __version__,
        "machine": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30)
        if proc.returncode == 0 and proc.stdout.strip():
            name, driver, mem = [s.strip() for s in proc.stdout.splitlines()[0].split(",")]
            meta.update(gpu_name=name, gpu_driver=driver, gpu_memory=mem)
    return meta


def interpreter_metadata(python: str, env: dict[str, str]) -> dict[str, object]:
    try:
        proc = subprocess.run([python, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
        return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return {}


def revision_interpreter_metadata(target: Target, sha: str | None, worktree: Path | None) -> dict[str, object]:
    """torch/CUDA/GPU as the server's interpreter sees them: a subprocess that imports torch
    (seconds), so it is kept per (interpreter, sha) like the --help text."""
    interpreter = hashlib.sha256(target.python.encode()).hexdigest()[:8]
    cache = sha_cache_file("meta", target.name, sha, f"-{interpreter}.json")
    if cache is not None and cache.is_file():
        try:
            return json.loads(cache.read_text())
        except json.JSONDecodeError:
            pass  # a torn write from an interrupted run: collect it again
    meta = interpreter_metadata(target.python, target.env(worktree, {}))
    if cache is not None and meta:
        atomic_write_json(cache, meta)
    return meta
