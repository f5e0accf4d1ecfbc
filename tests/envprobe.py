"""Wheels of `detcheck_envprobe`, a one-module package the reference server reports the version
of (fixtures/refserver: `envprobe_version`), written as zip files: no build backend, no network."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

PACKAGE = "detcheck_envprobe"


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_envprobe_wheel(wheel_dir: Path, version: str) -> Path:
    """`detcheck_envprobe-<version>-py3-none-any.whl` in `wheel_dir`, installable by pip."""
    dist_info = f"{PACKAGE}-{version}.dist-info"
    files = {
        f"{PACKAGE}/__init__.py": f'__version__ = "{version}"\n'.encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: detcheck-tests\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n",
    }
    record = [record_line(name, data) for name, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel_dir.mkdir(parents=True, exist_ok=True)
    path = wheel_dir / f"{PACKAGE}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return path
