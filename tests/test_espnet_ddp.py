"""Multi-node DDP LM training as a Slurm user launches it, simulated on CPU with gloo.

ESPnet's launcher (`python -m espnet2.bin.launch --cmd slurm.pl --num_nodes 2 --ngpu 0`) submits
through a fake `slurm.pl` and a fake `srun` on PATH that start one task per "node" with the SLURM_*
variables a real job step has; `slm_lm.bin.lm_train` then resolves rank and world size from them
(`--dist_launcher slurm`), joins a gloo process group through the shared file ESPnet's launcher names,
and trains under DistributedDataParallel. What differs on a GPU cluster: `--ngpu N` per node (ESPnet
spawns N processes per node, one GPU each) and the NCCL backend; those paths need GPUs and are not run here.
"""
import json
import math
import os
import re
import subprocess
import sys

import torch
import yaml

from test_espnet_lm import REPO, data, reporter_stats, tiny_config, train_args  # noqa: F401 (fixture)

FAKE_SLURM_PL = """#!/usr/bin/env bash
# fake slurm.pl: records its arguments, then runs the job in the foreground as a 1-task-per-node
# allocation of --num_nodes nodes (SLURM_NNODES), output to LOG
echo "$*" > "${FAKE_SLURM_RECORD}/slurm.pl.args"
while [[ "$1" == --* ]]; do
    [ "$1" = --num_nodes ] && export SLURM_NNODES="$2"
    shift 2
done
log="$1"; shift
"$@" > "${log}" 2>&1
"""

FAKE_SRUN = """#!{python}
# fake srun: records its arguments and starts one task per node with the variables of a job step
import json, os, subprocess, sys
args = sys.argv[1:]
with open(os.path.join(os.environ["FAKE_SLURM_RECORD"], "srun.args"), "w") as f:
    json.dump(args, f)
while args[0].startswith("--"):
    args = args[1:]
n = int(os.environ["SLURM_NNODES"])
step = dict(SLURM_NTASKS=str(n), SLURM_STEP_NUM_NODES=str(n), SLURM_STEP_NODELIST="localhost", SLURM_LOCALID="0")
tasks = [subprocess.Popen(args, env={{**os.environ, **step, "SLURM_PROCID": str(i), "SLURM_NODEID": str(i)}})
         for i in range(n)]
sys.exit(max(task.wait() for task in tasks))
"""

# slm_lm.bin.lm_train with ESPnet's trainer recording, on every rank, the model's weights before and
# after training and the process group it ran in (rank 0 alone writes ESPnet's checkpoints).
WORKER = """
import sys
import torch
from slm_lm.espnet_lm.task import SlmLMTask

class RecordingTrainer(SlmLMTask.trainer):
    @classmethod
    def run(cls, model, distributed_option, **kwargs):
        initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
        super().run(model=model, distributed_option=distributed_option, **kwargs)
        rank = torch.distributed.get_rank()
        torch.save(dict(initial=initial, final=model.state_dict(), world_size=torch.distributed.get_world_size(),
                        backend=torch.distributed.get_backend(), ddp=distributed_option.distributed),
                   f"{sys.argv[1]}/rank{rank}.pt")

SlmLMTask.trainer = RecordingTrainer
from slm_lm.bin.lm_train import main
main(sys.argv[2:])
"""


def test_two_node_slurm_ddp_on_cpu(data, tmp_path):  # noqa: F811
    """2 nodes x 1 CPU process, 2 epochs x 15 updates of a tiny SLM. Both ranks end with bitwise equal
    weights that moved from the initial ones (the ranks train on different halves of every batch, so
    without gradient all-reduce they would differ); the train and valid losses of epoch 2 are below
    epoch 1's, and the valid loss is 0.3 below log V (an untrained model's)."""
    bin_dir, record, out = tmp_path / "bin", tmp_path / "record", tmp_path / "exp"
    for d in (bin_dir, record, out):
        d.mkdir()
    (bin_dir / "slurm.pl").write_text(FAKE_SLURM_PL)
    (bin_dir / "srun").write_text(FAKE_SRUN.format(python=sys.executable))
    (tmp_path / "worker.py").write_text(WORKER)
    for script in ("slurm.pl", "srun"):
        (bin_dir / script).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO),
           "FAKE_SLURM_RECORD": str(record), "OMP_NUM_THREADS": "1"}
    lm_args = train_args(data, out, max_epoch=2, extra=["--num_iters_per_epoch", "15"],
                         config=tiny_config(tmp_path, "slm"))
    launch = [sys.executable, "-m", "espnet2.bin.launch", "--cmd", str(bin_dir / "slurm.pl"),
              "--log", str(out / "train.log"), "--ngpu", "0", "--num_nodes", "2",
              "--init_file_prefix", str(out / ".dist_init_"), "--multiprocessing_distributed", "true",
              "--", sys.executable, str(tmp_path / "worker.py"), str(out), *lm_args]
    result = subprocess.run(launch, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    log = (out / "train.log").read_text() if (out / "train.log").exists() else ""
    assert result.returncode == 0, result.stderr[-3000:] + log[-3000:]

    # what the launcher asked of Slurm and what each task was told
    assert "--gpu 0 --num_threads 1 --num_nodes 2" in (record / "slurm.pl.args").read_text()
    srun_args = json.loads((record / "srun.args").read_text())
    assert srun_args[0] == "--export=ALL" and srun_args[1:4] == [sys.executable, str(tmp_path / "worker.py"), str(out)]
    added = dict(zip(srun_args[-10::2], srun_args[-9::2]))  # what the launcher appends to the command
    init = added.pop("--dist_init_method")
    assert init.startswith(f"file://{out}/.dist_init_"), init
    assert added == {"--ngpu": "0", "--multiprocessing_distributed": "true", "--dist_launcher": "slurm",
                     "--dist_backend": "gloo"}

    ranks = [torch.load(out / f"rank{r}.pt", map_location="cpu") for r in (0, 1)]
    assert all(r["ddp"] and r["world_size"] == 2 and r["backend"] == "gloo" for r in ranks)
    final0, final1 = ranks[0]["final"], ranks[1]["final"]
    assert final0.keys() == final1.keys()
    for name in final0:
        assert torch.equal(final0[name], final1[name]), name
    moved = max(float((final0[k].float() - ranks[0]["initial"][k].float()).abs().max()) for k in final0)
    assert moved > 1e-3, moved

    stats = reporter_stats(out)
    assert stats[2]["train"]["loss"] < stats[1]["train"]["loss"], stats
    assert stats[2]["valid"]["loss"] < stats[1]["valid"]["loss"], stats
    assert stats[2]["valid"]["loss"] < math.log(data["vocab_size"]) - 0.3, stats
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert (config["distributed"], config["dist_launcher"], config["dist_backend"]) == (True, "slurm", "gloo")
    assert re.search(r"^\[[^]]*:0/2\] .*INFO", log, re.M), log[:2000]  # ESPnet's rank/world-size log prefix
    # ESPnet's checkpoint is rank 0's model: the same weights
    saved = torch.load(out / "2epoch.pth", map_location="cpu")
    for name, value in final0.items():
        assert torch.equal(saved[name], value), name
