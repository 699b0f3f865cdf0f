# Job launchers, as ESPnet's cmd.sh:
#   ${train_cmd} [--gpu N] [--num_threads N] [--mem M] [--max_jobs_run N] [--name NAME] [--num_nodes N] [JOB=1:N] LOG command args...
# runs the command with stdout+stderr in LOG and returns its exit status; JOB=1:N runs N array jobs,
# each with JOB in LOG and the arguments replaced by its index (key-file shards); --gpu N asks for
# N GPUs per job (ESPnet's `${cuda_cmd} --gpu N` convention).
#   cmd_backend=local  run here (default); array jobs run in parallel, GPUs handed out in turn
#   cmd_backend=slurm  `sbatch --wait` (arrays: --array=1-N, GPUs: --gres=gpu:N), partitions and options
#                      from conf/slurm.conf (CPU jobs to its cpu partition, GPU jobs to its gpu one; one
#                      partition for all: slurm_partition=NAME); a job's threads follow its CPUs;
#                      cuda_cmd is local/slurm.pl (a link to local/run_slurm.sh): by that name ESPnet's
#                      espnet2.bin.launch runs a multi-node training with srun (run.sh --num_nodes N)
# The launchers take the options of ESPnet's utils/run.pl and utils/slurm.pl, and those can replace them
# here (e.g. cuda_cmd="utils/slurm.pl --config conf/slurm.conf" in an ESPnet checkout).
cmd_backend="${cmd_backend:-local}"
slurm_partition="${slurm_partition:-}"
case "${cmd_backend}" in
    local)
        train_cmd="local/run_local.sh"
        cuda_cmd="local/run_local.sh"
        decode_cmd="local/run_local.sh"
        ;;
    slurm)
        train_cmd="local/run_slurm.sh --config conf/slurm.conf --num_threads 4"
        cuda_cmd="local/slurm.pl --config conf/slurm.conf --num_threads 8"
        decode_cmd="local/run_slurm.sh --config conf/slurm.conf --num_threads 2"
        ;;
    *) echo "cmd.sh: unknown cmd_backend=${cmd_backend} (local|slurm)" >&2; return 1 ;;
esac
