"""Where the host's CPU goes while a GPU run goes on: one line every INTERVAL seconds.

    python3 tools/gpu/cpu_monitor.py OUT.txt [INTERVAL]     (runs until killed)

Each line: the time (UTC), the load average, host memory used, the GPU's memory and utilisation, the
share of all cores busy (/proc/stat), then the cores each kind of process used since the last
line: SGLang's schedulers (`sglang::scheduler…`, where a server imports its model code, JIT-
compiles its kernels, captures CUDA graphs and runs its batches), detokenizers, the servers' main
processes (HTTP, tokenizer manager, `--help`), compilers (ptxas, gcc, nvcc…), the harness (nox,
harness.cli), the rest (a scheduler or detokenizer before it names itself: a spawned interpreter
still importing); and how many schedulers are alive. A process that ends between two lines
loses its last interval; the busy share (from /proc/stat) loses nothing. `totals` lines (rewritten in place at
each sample) hold the CPU seconds of each kind since the start. Standard library only: the GPU
box has nothing else to spare.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

COMPILERS = {"ptxas", "cc1", "cc1plus", "as", "ld", "gcc", "g++", "nvcc", "cicc", "clang", "fatbinary", "nvlink"}
KINDS = ("scheduler", "detokenizer", "server", "compiler", "harness", "other")
TICK = os.sysconf("SC_CLK_TCK")


def kind(cmdline: str, comm: str) -> str:
    if cmdline.startswith("sglang::scheduler"):
        return "scheduler"
    if cmdline.startswith("sglang::detokenizer"):
        return "detokenizer"
    if "sglang.launch_server" in cmdline or "sglang::" in cmdline:
        return "server"
    if comm in COMPILERS:
        return "compiler"
    if "harness.cli" in cmdline or "nox" in cmdline:
        return "harness"
    return "other"


def processes() -> dict[int, tuple[str, float]]:
    """pid → (kind, CPU seconds it used so far). Its own only: a parent's count of its reaped
    children (cutime) would count them again, under the parent's kind (the first version did:
    every server's CPU reappeared under the harness and the shell that started it)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        seconds = (int(fields[11]) + int(fields[12])) / TICK  # utime stime
        found[int(entry)] = (kind(cmdline, comm), seconds)
    return found


def busy_ticks() -> tuple[int, int]:
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def gpu() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,utilization.gpu", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return out or "n/a"


def memory_used_gib() -> float:
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":")
            info[name] = int(value.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 2**20


def main(out_path: str, interval: float) -> None:
    before, (busy0, all0) = processes(), busy_ticks()
    totals = dict.fromkeys(KINDS, 0.0)
    with open(out_path, "w") as out:
        out.write(f"# cores {os.cpu_count()}\n")
        while True:
            time.sleep(interval)
            now, (busy1, all1) = processes(), busy_ticks()
            used = dict.fromkeys(KINDS, 0.0)
            for pid, (what, seconds) in now.items():
                used[what] += max(0.0, seconds - before.get(pid, (what, 0.0))[1])
            for what in KINDS:
                totals[what] += used[what]
            share = (busy1 - busy0) / max(1, all1 - all0)
            schedulers = sum(1 for what, _ in now.values() if what == "scheduler")
            cores = " ".join(f"{what} {used[what] / interval:.1f}" for what in KINDS)
            out.write(f"{time.strftime('%T', time.gmtime())} load {os.getloadavg()[0]:.1f} host-used {memory_used_gib():.1f} GiB "
                      f"gpu {gpu()} busy {share:.0%} cores: {cores} schedulers {schedulers}\n")
            out.flush()
            with open(out_path + ".totals", "w") as t:
                t.write("CPU seconds since the start: " + " ".join(f"{k} {v:.0f}" for k, v in totals.items()) + "\n")
            before, busy0, all0 = now, busy1, all1


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 5.0)
