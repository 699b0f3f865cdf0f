#!/usr/bin/env bash
# Usage: run_slurm.sh [--cpus N] [--gpu N] [--mem M] [--time T] [--partition P] [--name NAME] [--num_nodes N]
#                     [--max_jobs_run N] [JOB=1:N] LOG command [args...]
# Runs the command as a Slurm batch job and waits for it, as Kaldi/ESPnet's slurm.pl: stdout and
# stderr go to LOG; returns non-zero when it (or any task of the array) failed.
# JOB=1:N submits a job array (`sbatch --array=1-N`): task J replaces the string JOB in LOG and in the
# arguments by J, so N key-file shards run as N tasks, anywhere in the cluster.
# --gpu N requests N GPUs per task (`--gres=gpu:N`); --cpus N or --num_threads N sets --cpus-per-task
# (the last given counts); --mem M: --mem; --name NAME: --job-name; --num_nodes N: --nodes (a multi-node
# training: ESPnet's espnet2.bin.launch runs `srun` inside the job); --max_jobs_run N: at most N array
# tasks at a time (--array 1-M%N). These are the options ESPnet's asr.sh and launch.py pass to
# utils/slurm.pl, which local/slurm.pl (a link to this script) stands for.
# --config FILE (cmd.sh: conf/slurm.conf): ESPnet's slurm.conf format ("command sbatch ...", "option
# gpu=0 --partition cpu", "option gpu=* --partition gpu --gres gpu:$0", "default gpu=0", ...): the sbatch
# options come from its rules for --name, --time, --mem, --num_threads, --num_nodes, --gpu (and any other
# --key value it names) instead of the built-in ones; a value without a rule is refused.
# The partition ${slurm_partition} (cmd.sh) or --partition, when given, wins; the environment goes to the job.
# A job's OMP_NUM_THREADS is its CPUs per process: --num_threads / max(1, --gpu) (one DDP process per GPU).
# A LOG that exists (a resumed job) is kept as LOG-stem.1.log (older ones shifted, up to .9).
# A re-run of an array submits only its missing tasks: a task that ended with rc 0 leaves q/NAME.J.done,
# its work (the command's words, each existing file followed by the md5 of its content); the tasks whose
# .done is that of the same work again are not resubmitted (all of them: nothing is submitted).
# A failed or stopped (scancel, time limit) task is named with its log; the stage then stops.
set -u
cpus=1; gpu=0; mem=""; time_limit=""; partition="${slurm_partition:-}"; name=""; num_nodes=1; max_jobs_run=0
config=""; declare -A extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --cpus|--num_threads|--num-threads) cpus="$2"; shift 2 ;;
        --gpu) gpu="$2"; shift 2 ;;
        --mem) mem="$2"; shift 2 ;;
        --time) time_limit="$2"; shift 2 ;;
        --partition) partition="$2"; shift 2 ;;
        --name) name="$2"; shift 2 ;;
        --num_nodes|--num-nodes) num_nodes="$2"; shift 2 ;;
        --max_jobs_run|--max-jobs-run) max_jobs_run="$2"; shift 2 ;;
        --config) config="$2"; shift 2 ;;
        --*) [ -n "${config}" ] || break; key="${1#--}"; extra["${key//-/_}"]="$2"; shift 2 ;;
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
base="$(basename "${log}" .log)"; base="${base//.JOB/}"; base="${base//JOB/}"
: "${name:=${base}}"
mkdir -p "${qdir}"
script="${qdir}/${base}.sh"
declare -A md5s=()
# task_work J: the work of task J, one word a line (JOB replaced by J in an array), each existing file
# followed by the md5 of its content
task_work() {
    local w words=("${@:2}")
    [ "${array}" = true ] && words=("${words[@]//JOB/$1}")
    for w in "${words[@]}"; do
        if [ -f "${w}" ]; then
            [ -n "${md5s[${w}]+set}" ] || md5s[${w}]=$(md5sum < "${w}" | cut -d' ' -f1)
            echo "${w} md5=${md5s[${w}]}"
        else
            echo "${w}"
        fi
    done
}
todo=(); finished=()
for ((j = first; j <= last; j++)); do
    if [ "${array}" = true ]; then
        task_work "${j}" "$@" > "${qdir}/${base}.${j}.work"
        if cmp -s "${qdir}/${base}.${j}.work" "${qdir}/${base}.${j}.done"; then finished+=("${j}"); continue; fi
        rm -f "${qdir}/${base}.${j}.done"
    fi
    todo+=("${j}")
done
# ranges J1 J2 ...: the sorted indices as sbatch's --array list, e.g. 1-3,5
ranges() {
    awk '{ for (i = 1; i <= NF; i++) { if (i > 1 && $i == $(i - 1) + 1) { end = $i; continue }
           if (i > 1) out = out (end != start ? start "-" end : start) ","; start = end = $i }
           print out (end != start ? start "-" end : start) }' <<< "$*"
}
if [ ${#finished[@]} -gt 0 ]; then
    if [ ${#todo[@]} -eq 0 ]; then
        echo "$0: ${name}: all ${#finished[@]} tasks finished earlier with the same work" \
             "(${qdir}/${base}.J.done): nothing submitted"
        exit 0
    fi
    echo "$0: ${name}: tasks $(ranges "${finished[@]}") finished earlier with the same work:" \
         "submitting $(ranges "${todo[@]}")"
fi
{
    echo "#!/usr/bin/env bash"
    printf 'cd %q\n' "${PWD}"
    if [ "${array}" = true ]; then echo 'j=${SLURM_ARRAY_TASK_ID}'; else echo 'j=1'; fi
    printf 'args=('; printf ' %q' "$@"; printf ' )\n'
    printf 'log=%q\n' "${log}"
    if [ "${array}" = true ]; then echo 'args=("${args[@]//JOB/${j}}"); log="${log//JOB/${j}}"'; fi
    echo 'mkdir -p "$(dirname "${log}")"'
    echo 'stem="${log%.log}"; if [ -e "${log}" ]; then  # keep the log of the earlier run'
    echo '    for ((i = 8; i >= 1; i--)); do [ -e "${stem}.${i}.log" ] && mv -f "${stem}.${i}.log" "${stem}.$((i + 1)).log"; done'
    echo '    mv -f "${log}" "${stem}.1.log"; fi'
    echo "export OMP_NUM_THREADS=$(( cpus / (gpu > 1 ? gpu : 1) > 0 ? cpus / (gpu > 1 ? gpu : 1) : 1 ))"
    echo '{ echo "# ${args[*]}"; echo "# started at $(date) on $(hostname) (Slurm job ${SLURM_JOB_ID:-?})"; } > "${log}"'
    echo '"${args[@]}" >> "${log}" 2>&1; rc=$?'
    echo 'echo "# ended (rc=${rc}) at $(date)" >> "${log}"'
    if [ "${array}" = true ]; then  # the task's work is done
        printf 'work=%q\n' "${qdir}/${base}"
        echo '[ ${rc} -ne 0 ] || { cp "${work}.${j}.work" "${work}.${j}.done.tmp" &&'
        echo '    mv -f "${work}.${j}.done.tmp" "${work}.${j}.done"; }'
    fi
    echo 'exit ${rc}'
} > "${script}"
submit=(sbatch); opts=(--wait --parsable --output "${qdir}/${base}.%A_%a.out")
if [ "${array}" = true ]; then
    tasks=$(ranges "${todo[@]}")
    if [ "${max_jobs_run}" -gt 0 ]; then opts+=(--array "${tasks}%${max_jobs_run}"); else opts+=(--array "${tasks}"); fi
fi
if [ -n "${config}" ]; then  # the rules of an ESPnet slurm.conf
    [ -r "${config}" ] || { echo "$0: --config ${config}: cannot read it" >&2; exit 1; }
    rules=$(sed -e 's/#.*//' "${config}")
    declare -A given=([name]="${name}" [num_threads]="${cpus}" [gpu]="${gpu}")
    [ -n "${mem}" ] && given[mem]="${mem}"; [ -n "${time_limit}" ] && given[time]="${time_limit}"
    [ "${num_nodes}" -gt 1 ] && given[num_nodes]="${num_nodes}"
    for key in "${!extra[@]}"; do given[${key}]="${extra[${key}]}"; done
    while read -r kind spec rest; do
        case "${kind}" in
            command) read -r -a submit <<< "${spec} ${rest}" ;;
            default) [ -n "${given[${spec%%=*}]+set}" ] || given[${spec%%=*}]="${spec#*=}" ;;
        esac
    done <<< "${rules}"
    for key in "${!given[@]}"; do
        value="${given[${key}]}"
        exact=$(awk -v s="${key}=${value}" '$1 == "option" && $2 == s { $1 = $2 = ""; print "+" $0; exit }' <<< "${rules}")
        any=$(awk -v s="${key}=*" '$1 == "option" && $2 == s { $1 = $2 = ""; print "+" $0; exit }' <<< "${rules}")
        rule="${exact:-${any}}"
        [ -n "${rule}" ] || { echo "$0: --${key} ${value}: no rule for it in ${config}" >&2; exit 1; }
        read -r -a words <<< "${rule#+}"
        opts+=("${words[@]//\$0/${value}}")
    done
else
    opts+=(--job-name "${name}" --cpus-per-task "${cpus}")
    [ "${num_nodes}" -gt 1 ] && opts+=(--nodes "${num_nodes}")
    [ "${gpu}" -gt 0 ] && opts+=(--gres "gpu:${gpu}")
    [ -n "${mem}" ] && opts+=(--mem "${mem}")
    [ -n "${time_limit}" ] && opts+=(--time "${time_limit}")
fi
[ -n "${partition}" ] && opts+=(--partition "${partition}")
: > "${qdir}/${base}.submitted"  # a task log older than this is from an earlier run
"${submit[@]}" "${opts[@]}" "${script}" > "${qdir}/${base}.sbatch.out" 2>&1
rc=$?
sbatch_rc=${rc}
if [ ${rc} -eq 0 ] && [ "${array}" = true ]; then
    # sbatch --wait may end with 0 when scancel stopped tasks that had not started: every task must have its .done
    for j in "${todo[@]}"; do [ -f "${qdir}/${base}.${j}.done" ] || rc=1; done
fi
if [ ${rc} -ne 0 ]; then
    echo "$0: Slurm job ${name} failed (sbatch rc=${sbatch_rc}); logs: ${log}, ${qdir}/${base}.*" >&2
    for j in "${todo[@]}"; do
        jlog="${log//JOB/${j}}"
        [ -f "${qdir}/${base}.${j}.done" ] && continue
        if [ ! "${jlog}" -nt "${qdir}/${base}.submitted" ]; then
            echo "$0: task ${j} of ${name} did not start: ${jlog} was not written" >&2
        elif ended=$(grep -m 1 -o '^# ended (rc=[0-9]*' "${jlog}"); then
            echo "$0: task ${j} of ${name} failed (${ended#*(}): see ${jlog}" >&2
            tail -n 15 "${jlog}" >&2
        else
            echo "$0: task ${j} of ${name} was stopped before it ended (scancel, time limit or node failure):" \
                 "see ${jlog}" >&2
        fi
    done
    tail -n 5 "${qdir}/${base}.sbatch.out" >&2
fi
exit ${rc}
