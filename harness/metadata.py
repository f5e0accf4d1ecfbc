"""Where a result was measured: machine, GPU, driver, torch, server version.

Collected by running the server's own interpreter (the harness does not import torch or
SGLang), never importing torch: torch's version and CUDA build once per interpreter (read from
its `version.py`), where the server package is imported from once per revision. The GPUs come
from nvidia-smi (harness/nvidia_smi.py). Missing tools give missing keys, never errors.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import time
from pathlib import Path
from typing import Callable

from harness import __version__, nvidia_smi
from harness.paths import cache_dir, sha_cache_file
from harness.result_files import atomic_write_json
from harness.targets import Target

# torch's build facts without importing torch (an import takes seconds, and on a cold cache it
# ran beside every first launch): its own `version.py`, found on the interpreter's path.
_TORCH_PROBE = r"""
import ast, importlib.util, json, os
out = {}
try:
    spec = importlib.util.find_spec("torch")
except Exception:
    spec = None
if spec is not None and spec.submodule_search_locations:
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    try:
        tree = ast.parse(open(path).read())
    except (OSError, SyntaxError):
        tree = None
    for node in tree.body if tree else ():
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        name = getattr(target, "id", None)
        if name in ("__version__", "cuda") and isinstance(getattr(node, "value", None), ast.Constant):
            out["torch" if name == "__version__" else "cuda"] = node.value.value
print(json.dumps(out))
"""

_PACKAGE_PROBE = r"""
import json, importlib.util
out = {}
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
    try:
        gpus = nvidia_smi.query("gpu", ("name", "driver_version", "memory.total"))
    except nvidia_smi.NvidiaSmiError:
        gpus = []  # no nvidia-smi, or no answer from it: no GPU keys, never a guess
    if gpus:
        name, driver, mem = gpus[0]
        meta.update(gpu_name=name, gpu_driver=driver, gpu_memory=f"{mem} MiB", gpu_count=len(gpus))
    return meta


def _run_probe(python: str, code: str, env: dict[str, str]) -> dict[str, object]:
    try:
        proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return {}


def _cached(cache: Path | None, collect: Callable[[], dict[str, object]]) -> dict[str, object]:
    if cache is not None and cache.is_file():
        try:
            return json.loads(cache.read_text())
        except json.JSONDecodeError:
            pass  # a torn write from an interrupted run: collect it again
    meta = collect()
    if cache is not None and meta:
        atomic_write_json(cache, meta)
    return meta


def interpreter_id(python: str) -> str:
    """A short stable name for an interpreter path (store keys, cache files)."""
    return hashlib.sha256(python.encode()).hexdigest()[:8]


def revision_interpreter_metadata(target: Target, sha: str | None, worktree: Path | None) -> dict[str, object]:
    """torch and its CUDA build as the server's interpreter has them (kept per interpreter), and
    where it imports the server package from (kept per interpreter and sha)."""
    interpreter = interpreter_id(target.python)
    env = target.env(worktree, {})
    torch_facts = _cached(cache_dir() / "meta" / f"interpreter-{interpreter}.json",
                          lambda: _run_probe(target.python, _TORCH_PROBE, env))
    package = _cached(sha_cache_file("meta", target.name, sha, f"-{interpreter}.json"),
                      lambda: _run_probe(target.python, _PACKAGE_PROBE, env))
    return {**torch_facts, **package}
