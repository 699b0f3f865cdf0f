# Job launchers, as ESPnet's cmd.sh: `${train_cmd} LOG command args...` runs the command
# with stdout+stderr appended to LOG and returns its exit status.
#   cmd_backend=local  run here (default)
#   cmd_backend=slurm  submit with `srun` (blocking) to the partition in ${slurm_partition}
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
        cuda_cmd="local/run_slurm.sh --cpus 8 --gpus ${ngpu:-1}"
        decode_cmd="local/run_slurm.sh --cpus 2"
        ;;
    *) echo "cmd.sh: unknown cmd_backend=${cmd_backend} (local|slurm)" >&2; return 1 ;;
esac
