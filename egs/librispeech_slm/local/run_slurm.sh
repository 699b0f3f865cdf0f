#!/usr/bin/env bash
# Usage: run_slurm.sh [--cpus N] [--gpus N] [--partition P] LOG command [args...]
# Runs the command as a blocking Slurm job step (`srun`), logging to LOG; returns its status.
set -u
cpus=1; gpus=0; partition="${slurm_partition:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        --cpus) cpus="$2"; shift 2 ;;
        --gpus) gpus="$2"; shift 2 ;;
        --partition) partition="$2"; shift 2 ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || { echo "usage: $0 [--cpus N] [--gpus N] LOG command [args...]" >&2; exit 1; }
command -v srun >/dev/null || { echo "$0: srun not found; use cmd_backend=local" >&2; exit 1; }
log="$1"; shift
mkdir -p "$(dirname "${log}")"
opts=(--cpus-per-task "${cpus}" --job-name "$(basename "${log}" .log)")
[ "${gpus}" -gt 0 ] && opts+=(--gres "gpu:${gpus}")
[ -n "${partition}" ] && opts+=(--partition "${partition}")
{ echo "# srun ${opts[*]} $*"; echo "# started at $(date)"; } > "${log}"
srun "${opts[@]}" "$@" >> "${log}" 2>&1
rc=$?
echo "# ended (rc=${rc}) at $(date)" >> "${log}"
[ ${rc} -eq 0 ] || { echo "$0: job failed (rc=${rc}), see ${log}" >&2; tail -n 15 "${log}" >&2; }
exit ${rc}
