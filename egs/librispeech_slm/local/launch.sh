#!/usr/bin/env bash
# The trainings' launch, sourced by local/stages.sh after cmd.sh (the job launchers, local/run_local.sh and
# local/run_slurm.sh).
# train DIR COMMAND...: a training (ASR or LM) into DIR, log DIR/train.log, --ngpu added; on several nodes
# through ESPnet's launcher (srun in one multi-node job, rendezvous through a file in DIR), as asr.sh
train() {
    local dir=$1; shift
    if [ "${num_nodes}" -gt 1 ]; then
        OMP_NUM_THREADS="${train_threads:-${nj}}" python -m espnet2.bin.launch --cmd "${cuda_cmd} --name $(basename "${dir}")" \
            --log "${dir}/train.log" --ngpu "${ngpu}" --num_nodes "${num_nodes}" \
            --init_file_prefix "${dir}/.dist_init_" --multiprocessing_distributed true -- "$@" \
            ${tensorboard[@]+"${tensorboard[@]}"}
    else
        OMP_NUM_THREADS="${train_threads:-${nj}}" ${cuda_cmd} --gpu "${ngpu}" "${dir}/train.log" "$@" --ngpu "${ngpu}" \
            ${tensorboard[@]+"${tensorboard[@]}"}
    fi
}
