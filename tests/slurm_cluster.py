"""A real one-node Slurm cluster for the tests (Debian's slurm-wlm: slurmctld + slurmd), started
from a slurm.conf generated in a temporary directory and stopped afterwards.

Authentication is `auth/none` (Slurm 22.05 still ships it): one node on the loopback, every
daemon and job as root, so munge is not needed. The node declares more CPUs than the machine has
(`SlurmdParameters=config_overrides`) and the partition oversubscribes, so that a matrix entry's
jobs and a bisect round's tasks are queued at once, as on a real cluster, on two cores.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from harness.server import free_port  # below the ephemeral range: see its docstring

DAEMONS = ("slurmctld", "slurmd", "sbatch", "srun", "sinfo", "scancel")
NODE = "detcheck-node"
NODE_CPUS = 8


def why_not() -> str | None:
    """Why no cluster can be started here; None when one can."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing; Debian: apt-get install slurm-wlm)"
    if os.geteuid() != 0:
        return "slurmd must run as root"
    return None


def conf_text(root: Path) -> str:
    host = socket.gethostname().split(".")[0]
    lines = {
        "ClusterName": "detcheck", "SlurmctldHost": f"{host}(127.0.0.1)",
        "SlurmctldPort": str(free_port()), "SlurmdPort": str(free_port()),
        "SlurmUser": "root", "SlurmdUser": "root", "AuthType": "auth/none", "CredType": "cred/none",
        "StateSaveLocation": str(root / "state"), "SlurmdSpoolDir": str(root / "spool"),
        "SlurmctldPidFile": str(root / "slurmctld.pid"), "SlurmdPidFile": str(root / "slurmd.pid"),
        "SlurmctldLogFile": str(root / "slurmctld.log"), "SlurmdLogFile": str(root / "slurmd.log"),
        "ProctrackType": "proctrack/pgid", "TaskPlugin": "task/none", "MpiDefault": "none",
        "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_CPU", "SchedulerType": "sched/backfill",
        "SlurmdParameters": "config_overrides", "ReturnToService": "2", "JobCompType": "jobcomp/none",
        "AccountingStorageType": "accounting_storage/none", "JobAcctGatherType": "jobacct_gather/none",
        "KillWait": "5", "MinJobAge": "600",
    }
    return ("".join(f"{k}={v}\n" for k, v in lines.items())
            + f"NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={NODE_CPUS} State=UNKNOWN\n"
            + f"PartitionName=detcheck Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4\n")


class Cluster:
    def __init__(self, root: Path):
        self.root = root
        for sub in ("state", "spool"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self.conf = root / "slurm.conf"
        self.conf.write_text(conf_text(root))
        self.env = {"SLURM_CONF": str(self.conf)}
        self.procs: list[subprocess.Popen] = []

    def start(self, timeout_s: float = 60) -> "Cluster":
        env = {**os.environ, **self.env}
        self.procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(self.conf)], env=env,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1)
        self.procs.append(subprocess.Popen(["slurmd", "-D", "-N", NODE, "-f", str(self.conf)], env=env,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-n", NODE, "-o", "%T"], capture_output=True, text=True, env=env)
            if state.stdout.strip() in ("idle", "mixed", "allocated"):
                return self
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the Slurm cluster did not come up: {self.log_tail()}")

    def log_tail(self) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.root / name
            if path.is_file():
                out.append(f"{name}: " + " | ".join(path.read_text(errors="replace").splitlines()[-5:]))
        return "; ".join(out)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
