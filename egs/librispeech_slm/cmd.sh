# Job launchers, as ESPnet's cmd.sh:
#   ${train_cmd} [--gpu N] [JOB=1:N] LOG command args...
# runs the command with stdout+stderr in LOG and returns its exit status; JOB=1:N runs N array jobs,
# each with JOB in LOG and the arguments replaced by its index (key-file shards); --gpu N asks for
# N GPUs per job (ESPnet's `${cuda_cmd} --gpu N` convention).
#   cmd_backend=local  run here (default); array jobs run in parallel, GPUs handed out in turn
#   cmd_backend=slurm  `sbatch --wait` (arrays: --array=1-N, GPUs: --gres=gpu:N) to ${slurm_partition}
cmd_backend="${cmd_backend:-local}"
slurm_partition="${slurm_partition:-}"
case "${cmd_backend}" in
    local)
        train_cmd="local/run_local.sh"
        cuda_cmd="local/run_local.sh"
        decode_cmd="local/run_local.sh"
        ;;
    slurm)
        train_cmd="local/run_slurm.sh --cpus 4"
        cuda_cmd="local/run_slurm.sh --cpus 8"
        decode_cmd="local/run_slurm.sh --cpus 2"
        ;;
    *) echo "cmd.sh: unknown cmd_backend=${cmd_backend} (local|slurm)" >&2; return 1 ;;
esac
