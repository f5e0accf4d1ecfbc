"""A page opened in Debian's headless Chromium, offline: what it drew (its DOM after the load
event) and what went wrong (every console message: the dashboard logs none, so any is a
problem, an uncaught error or a resource that did not load included).

Offline is enforced, not assumed: every host resolves to nothing and the proxy is a closed
port, so a page that fetched anything from a network would log its failure.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
         "--enable-logging=stderr", "--v=0")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass(frozen=True)
class PageLoad:
    dom: str
    console: list[str]


def load(page: Path, *extra: str, timeout: float = 120) -> PageLoad:
    """The page's DOM after its load event (`--dump-dom`) and its console messages."""
    binary = chromium()
    assert binary is not None, "no chromium on PATH"
    with tempfile.TemporaryDirectory(prefix="detcheck-chromium-") as profile:
        proc = subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *extra, "--dump-dom",
                               page.resolve().as_uri()], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return PageLoad(proc.stdout, re.findall(r":CONSOLE[^\]]*\] (.*)", proc.stderr))


def screenshot(page: Path, out: Path, width: int = 1400, height: int = 1000, timeout: float = 120) -> None:
    binary = chromium()
    assert binary is not None, "no chromium on PATH"
    with tempfile.TemporaryDirectory(prefix="detcheck-chromium-") as profile:
        subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                        f"--screenshot={out.resolve()}", page.resolve().as_uri()],
                       capture_output=True, text=True, timeout=timeout, check=True)


def links(dom: str) -> list[str]:
    """Every href and src of the DOM."""
    return re.findall(r"""(?:href|src)=["']([^"']+)["']""", dom)
