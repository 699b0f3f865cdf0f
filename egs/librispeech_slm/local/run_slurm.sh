#!/usr/bin/env bash
# Usage: run_slurm.sh [--cpus N] [--gpu N] [--mem M] [--time T] [--partition P] [JOB=1:N] LOG command [args...]
# Runs the command as a Slurm batch job and waits for it, as Kaldi/ESPnet's slurm.pl: stdout and
# stderr go to LOG; returns non-zero when it (or any task of the array) failed.
# JOB=1:N submits a job array (`sbatch --array=1-N`): task J replaces the string JOB in LOG and in the
# arguments by J, so N key-file shards run as N tasks, anywhere in the cluster.
# --gpu N requests N GPUs per task (`--gres=gpu:N`); --cpus N sets --cpus-per-task.
# The partition defaults to ${slurm_partition} (cmd.sh); the environment is exported to the job.
set -u
cpus=1; gpu=0; mem=""; time_limit=""; partition="${slurm_partition:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        --cpus) cpus="$2"; shift 2 ;;
        --gpu) gpu="$2"; shift 2 ;;
        --mem) mem="$2"; shift 2 ;;
        --time) time_limit="$2"; shift 2 ;;
        --partition) partition="$2"; shift 2 ;;
        *) break ;;
    esac
done
first=1; last=1; array=false
if [[ "${1:-}" =~ ^JOB=([0-9]+):([0-9]+)$ ]]; then
    first=${BASH_REMATCH[1]}; last=${BASH_REMATCH[2]}; array=true; shift
fi
[ $# -ge 2 ] || { echo "usage: $0 [--cpus N] [--gpu N] [JOB=1:N] LOG command [args...]" >&2; exit 1; }
command -v sbatch >/dev/null || { echo "$0: sbatch not found; use cmd_backend=local" >&2; exit 1; }
log="$1"; shift
qdir="$(dirname "${log}")/q"
name="$(basename "${log}" .log)"; name="${name//.JOB/}"; name="${name//JOB/}"
mkdir -p "${qdir}"
script="${qdir}/${name}.sh"
{
    echo "#!/usr/bin/env bash"
    printf 'cd %q\n' "${PWD}"
    if [ "${array}" = true ]; then echo 'j=${SLURM_ARRAY_TASK_ID}'; else echo 'j=1'; fi
    printf 'args=('; printf ' %q' "$@"; printf ' )\n'
    printf 'log=%q\n' "${log}"
    if [ "${array}" = true ]; then echo 'args=("${args[@]//JOB/${j}}"); log="${log//JOB/${j}}"'; fi
    echo 'mkdir -p "$(dirname "${log}")"'
    echo '{ echo "# ${args[*]}"; echo "# started at $(date) on $(hostname) (Slurm job ${SLURM_JOB_ID:-?})"; } > "${log}"'
    echo '"${args[@]}" >> "${log}" 2>&1; rc=$?'
    echo 'echo "# ended (rc=${rc}) at $(date)" >> "${log}"'
    echo 'exit ${rc}'
} > "${script}"
opts=(--wait --parsable --job-name "${name}" --cpus-per-task "${cpus}" --output "${qdir}/${name}.%A_%a.out")
[ "${array}" = true ] && opts+=(--array "${first}-${last}")
[ "${gpu}" -gt 0 ] && opts+=(--gres "gpu:${gpu}")
[ -n "${mem}" ] && opts+=(--mem "${mem}")
[ -n "${time_limit}" ] && opts+=(--time "${time_limit}")
[ -n "${partition}" ] && opts+=(--partition "${partition}")
sbatch "${opts[@]}" "${script}" > "${qdir}/${name}.sbatch.out" 2>&1
rc=$?
if [ ${rc} -ne 0 ]; then
    echo "$0: Slurm job ${name} failed (sbatch rc=${rc}); logs: ${log}, ${qdir}/${name}.*" >&2
    for ((j = first; j <= last; j++)); do
        jlog="${log//JOB/${j}}"
        if [ -f "${jlog}" ] && ! grep -q '^# ended (rc=0)' "${jlog}"; then tail -n 15 "${jlog}" >&2; fi
    done
    tail -n 5 "${qdir}/${name}.sbatch.out" >&2
fi
exit ${rc}
