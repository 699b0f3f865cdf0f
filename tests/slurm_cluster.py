"""A one-node Slurm cluster on this machine for the tests: munged, slurmctld and slurmd of Debian's
slurm-wlm and munge packages, run as root with their own key, sockets, ports, state and logs under one
directory, and stopped again by the test that started them.

Partitions as the recipe's conf/slurm.conf names them: ``cpu`` (the default) and ``gpu``. The node has
no GPU: it declares 4 GPUs of the generic resource ``gpu`` whose device files are /dev/null, /dev/zero,
/dev/full and /dev/urandom, so that Slurm schedules ``--gres gpu:N`` jobs (and sets
CUDA_VISIBLE_DEVICES) while torch, in the job, finds no CUDA device. The node declares 16 CPUs whatever
the machine has (``SlurmdParameters=config_overrides``), as the recipe asks up to 8 per job.

MinJobAge=0 keeps every finished job's record (a test cluster is short-lived): `sbatch --wait` then asks
after its job every 2 s, where a larger MinJobAge lets it wait 2, 8, then 32 s between its questions.
"""
import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
INSTALL = "apt-get install -y slurm-wlm munge (as root; .ci/run does it)"
FAKE_GPUS = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")


def missing() -> str:
    """Why no cluster can start here ("" when it can): a program missing, or not root."""
    absent = [p for p in (*DAEMONS, "mungekey", "sbatch", "sinfo", "scancel") if shutil.which(p) is None]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} not found): {INSTALL}"
    if os.geteuid() != 0:
        return "the test cluster's slurmd runs the jobs as root: run the Slurm tests as root"
    return ""


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _config(root: Path, host: str) -> str:
    ctld_port, d_port = _free_ports(2)
    return f"""ClusterName=slmtest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
EnforcePartLimits=ALL
MinJobAge=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
GresTypes=gpu
NodeName={host} CPUs=16 RealMemory=16000 Gres=gpu:{len(FAKE_GPUS)} State=UNKNOWN
PartitionName=cpu Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={host} MaxTime=INFINITE State=UP
"""


def _run(args: list, env: dict, what: str) -> None:
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (rc {proc.returncode}): {' '.join(map(str, args))}\n{proc.stderr}")


def _stop(root: Path) -> None:
    for name in reversed(DAEMONS):
        pid_file = root / f"{name}.pid"
        try:
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            continue
        for _ in range(100):  # up to 10 s for it to end
            if not _alive(pid):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether process pid runs (a zombie, ended but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _wait_for_idle_node(env: dict, root: Path) -> None:
    for _ in range(300):  # up to 30 s
        proc = subprocess.run(["sinfo", "-h", "-o", "%P %t"], env=env, capture_output=True, text=True, timeout=30)
        states = dict(line.split() for line in proc.stdout.splitlines() if line.strip())
        if states.get("cpu*") == "idle" and states.get("gpu") == "idle":
            return
        time.sleep(0.1)
    logs = "".join((root / f).read_text()[-2000:] for f in ("slurmctld.log", "slurmd.log") if (root / f).exists())
    raise RuntimeError(f"the test cluster's node did not become idle: sinfo says {proc.stdout!r}\n{logs}")


@contextmanager
def slurm_cluster(root: Path):
    """Start the cluster with its files under ``root`` (created); yields the environment the Slurm commands
    need (SLURM_CONF); stops the daemons at the end."""
    root.mkdir(parents=True, exist_ok=True)
    for d in ("state", "spool"):
        (root / d).mkdir(exist_ok=True)
    host = socket.gethostname().split(".")[0]
    (root / "slurm.conf").write_text(_config(root, host))
    (root / "gres.conf").write_text("".join(f"Name=gpu File={f}\n" for f in FAKE_GPUS))
    env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))
    try:
        _run(["mungekey", "--create", f"--keyfile={root}/munge.key"], env, "mungekey")
        # --force: pytest's temporary directories are not readable by all, which munged warns about
        _run(["munged", "--force", f"--socket={root}/munge.socket", f"--key-file={root}/munge.key",
              f"--log-file={root}/munged.log", f"--pid-file={root}/munged.pid", f"--seed-file={root}/munged.seed"],
             env, "munged")
        _run(["slurmctld", "-f", str(root / "slurm.conf")], env, "slurmctld")
        _run(["slurmd", "-f", str(root / "slurm.conf")], env, "slurmd")
        _wait_for_idle_node(env, root)
        yield env
    finally:
        _stop(root)


def slurm_version() -> str:
    """``slurm 22.05.8``: what sbatch --version prints."""
    return subprocess.run(["sbatch", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
