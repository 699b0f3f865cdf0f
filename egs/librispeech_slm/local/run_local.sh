#!/usr/bin/env bash
# Usage: run_local.sh [--gpu N] [JOB=1:N] LOG command [args...]
# Runs the command here, as Kaldi/ESPnet's run.pl: stdout and stderr go to LOG (with a header and a
# footer giving the time and exit status); returns non-zero when the command (or any array job) failed.
# JOB=1:N runs N copies in parallel, each with the string JOB in LOG and in the arguments replaced by
# its index (key-file shards: `JOB=1:4 exp/log/decode.JOB.log decode.py --keys keys.JOB`).
# --gpu N: each job uses N GPUs; with several GPUs here, array jobs get disjoint ones in turn through
# CUDA_VISIBLE_DEVICES (job i: the N devices after (i-1)*N, modulo the GPUs visible).
# --max_jobs_run N (Kaldi's --max-jobs-run): at most N array jobs at a time. The other options of
# ESPnet's run.pl/slurm.pl and of local/run_slurm.sh (--num_threads, --cpus, --mem, --time, --partition,
# --name, --config) are accepted and ignored here; --num_nodes above 1 is refused, as by run.pl.
# A LOG that exists (a resumed job) is kept as LOG-stem.1.log (older ones shifted, up to .9).
set -u
gpu=0; max_jobs_run=0
while [ $# -gt 0 ]; do
    case "$1" in
        --gpu) gpu="$2"; shift 2 ;;
        --max_jobs_run|--max-jobs-run) max_jobs_run="$2"; shift 2 ;;
        --num_nodes|--num-nodes)
            [ "$2" -le 1 ] || { echo "$0: --num_nodes $2: this launcher runs on this machine only" >&2; exit 1; }
            shift 2 ;;
        --num_threads|--num-threads|--cpus|--mem|--time|--partition|--name|--config) shift 2 ;;
        *) break ;;
    esac
done
first=1; last=1; array=false
if [[ "${1:-}" =~ ^JOB=([0-9]+):([0-9]+)$ ]]; then
    first=${BASH_REMATCH[1]}; last=${BASH_REMATCH[2]}; array=true; shift
fi
[ $# -ge 2 ] || { echo "usage: $0 [--gpu N] [JOB=1:N] LOG command [args...]" >&2; exit 1; }
log="$1"; shift
devices=()
if [ "${gpu}" -gt 0 ] && [ "${array}" = true ]; then
    if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then IFS=, read -r -a devices <<< "${CUDA_VISIBLE_DEVICES}"
    elif command -v nvidia-smi >/dev/null; then mapfile -t devices < <(nvidia-smi -L 2>/dev/null | awk '{print NR-1}')
    fi
fi

rotate() {  # rotate LOG: an existing LOG becomes LOG-stem.1.log, .1 becomes .2, ... (9 kept)
    local base="${1%.log}" i
    [ -e "$1" ] || return 0
    for ((i = 8; i >= 1; i--)); do [ -e "${base}.${i}.log" ] && mv -f "${base}.${i}.log" "${base}.$((i + 1)).log"; done
    mv -f "$1" "${base}.1.log"
}

run_one() {  # run_one J: job J of the array
    local j=$1 jlog="${log//JOB/$1}" args=("${@:2}")
    [ "${array}" = true ] && args=("${args[@]//JOB/${j}}")
    if [ ${#devices[@]} -gt 0 ]; then
        local k ids=()
        for ((k = 0; k < gpu; k++)); do ids+=("${devices[$(( ((j - first) * gpu + k) % ${#devices[@]} ))]}"); done
        export CUDA_VISIBLE_DEVICES; CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${ids[*]}")
    fi
    mkdir -p "$(dirname "${jlog}")"
    rotate "${jlog}"
    { echo "# ${args[*]}"; echo "# started at $(date)"; } > "${jlog}"
    "${args[@]}" >> "${jlog}" 2>&1
    local rc=$?
    echo "# ended (rc=${rc}) at $(date)" >> "${jlog}"
    if [ ${rc} -ne 0 ]; then
        echo "$0: command failed (rc=${rc}), see ${jlog}:" >&2
        tail -n 15 "${jlog}" >&2
    fi
    return ${rc}
}

if [ "${array}" = false ]; then run_one 1 "$@"; exit $?; fi
pids=()
failed=0
for ((j = first; j <= last; j++)); do
    if [ "${max_jobs_run}" -gt 0 ] && [ ${#pids[@]} -ge "${max_jobs_run}" ]; then  # wait for the oldest
        wait "${pids[0]}" || failed=$((failed + 1)); pids=("${pids[@]:1}")
    fi
    run_one "${j}" "$@" & pids+=($!)
done
for pid in "${pids[@]}"; do wait "${pid}" || failed=$((failed + 1)); done
if [ ${failed} -gt 0 ]; then
    echo "$0: ${failed} of $((last - first + 1)) jobs failed (logs: ${log})" >&2; exit 1
fi
exit 0
