#!/usr/bin/env bash
# LibriSpeech ASR + Sliding-LM (Transcormer) N-best rescoring, ESPnet-style recipe.
#
#   ./run.sh                      # the embedded default: offline mini corpus (KJV + espeak-ng),
#                                 # every stage on 2 CPU cores, prints the WER table
#   ./run.sh --mini false --ngpu 4 --librispeech_dir /data   # the paper's LibriSpeech-960 setting
#   ./run.sh --stage 6 --stop_stage 8                         # re-run some stages
#
# Stages (each logs to ${exp}/logs/stage<N>_<name>.log and leaves ${exp}/.done/stage<N>; a finished
# stage is skipped on re-runs, a killed one resumes):
#   0 corpus: download LibriSpeech (OpenSLR 12) + LM corpus (OpenSLR 11), or build the mini corpus
#   1 Kaldi-style data directories      2 BPE / token list (ASR and LMs share it)
#   3 LM text, dev/test decontaminated  4 ASR training (ESPnet Conformer, collect-stats pass first)
#   5 LM training (SLM; CLM/MLM/Bi-LM with --lm_kinds)   6 N-best decoding (Speech2Text, beam 10)
#   7 rescoring, lambda tuned on dev    8 RESULTS.md (WER: baseline, rescored, oracle)
set -euo pipefail
cd "$(dirname "$0")"
{ # the braces make bash read the whole script first, so editing it during a run is harmless

stage=0
stop_stage=8
ngpu=0                 # GPUs for training / decoding (0 = CPU)
nj=2                   # parallel jobs: synthesis, decoding
mini=true              # true: offline mini corpus; false: LibriSpeech
micro=false            # with --mini true: a few-minute smoke run (CI)
workdir=               # where downloads/ data/ exp/ go (default: . for LibriSpeech, mini/ or micro/)
librispeech_dir=       # directory holding LibriSpeech/ (default: ${workdir}/downloads)
mirror=https://www.openslr.org/resources   # or a local directory with 12/ and 11/ (offline testing)
lm_kinds=slm           # LMs to train and compare, e.g. "slm clm mlm bilm"
lm_size=small          # full setting: conf/tuning/train_lm_<kind>_<lm_size>.yaml
asr_config=            # default: conf/train_asr.yaml, conf/train_asr_mini.yaml (mini/micro)
decode_config=        # default: conf/decode_asr.yaml (conf/decode_asr_micro.yaml with --micro true)
asr_train_args=        # extra options for espnet2.bin.asr_train (e.g. "--max_epoch 1")
lm_train_args=         # extra options for slm_lm.bin.lm_train
fusion_lm=             # e.g. clm: decode with that stage-5 LM fused in the beam (weight: lm_weight of
                       # --decode_config, e.g. conf/decode_asr_lm.yaml); bidirectional kinds are refused
train_threads=         # CPU threads of a training job (default: --nj)
bpe_size=              # default: 5000 (LibriSpeech), 300 (mini), 100 (micro)
lm_corpus=             # mini: bible (default) or gutenberg (../shared/data/text when present)
train_parts="train-clean-100 train-clean-360 train-other-500"
dev_parts="dev-clean dev-other"
test_parts="test-clean test-other"
am_weights="decoder=0.7,ctc=0.3"   # AM score of a hypothesis = these weights x its per-scorer scores
lambda_range="0:5:0.1"
cmd_backend=local      # local | slurm (see cmd.sh)
help_message="Usage: $0 [--stage N] [--stop_stage N] [--mini true|false] [--micro true|false]
  [--ngpu N] [--nj N] [--workdir DIR] [--librispeech_dir DIR] [--mirror URL|DIR]
  [--lm_kinds 'slm clm mlm bilm'] [--asr_config YAML] [--bpe_size N] [--cmd_backend local|slurm]
  [--fusion_lm clm --decode_config conf/decode_asr_lm.yaml]"

. ./local/parse_options.sh
# The repository's Python environment (.venv): created on first use, a quick no-op when up to date.
bash ../../local/setup_env.sh
. ./path.sh
. ./cmd.sh

log() { echo "$(date '+%F %T') (run.sh) $*"; }
die() { echo "$(date '+%F %T') (run.sh) ERROR: $*" >&2; exit 1; }

if [ "${micro}" = true ] && [ "${mini}" != true ]; then die "--micro true needs --mini true"; fi
if [ "${mini}" = true ]; then
    tag=mini; [ "${micro}" = true ] && tag=micro
    train_parts="train-mini"
    : "${workdir:=${tag}}"
    : "${asr_config:=conf/train_asr_mini.yaml}"
    if [ "${micro}" = true ]; then
        : "${bpe_size:=100}"
        : "${asr_train_args:=--max_epoch 1 --batch_bins 400000 --encoder_conf num_blocks=1 --decoder_conf num_blocks=1}"
        : "${lm_train_args:=--max_epoch 1 --num_iters_per_epoch 10 --lm_conf size=tiny}"
        : "${decode_config:=conf/decode_asr_micro.yaml}"
    fi
    : "${bpe_size:=300}"
    : "${lm_corpus:=bible}"
    lm_conf() { echo "conf/train_lm_${1}_mini.yaml"; }
else
    : "${workdir:=.}"
    : "${asr_config:=conf/train_asr.yaml}"
    : "${bpe_size:=5000}"
    lm_conf() { echo "conf/tuning/train_lm_${1}_${lm_size}.yaml"; }
fi
: "${decode_config:=conf/decode_asr.yaml}"
downloads="${workdir}/downloads"
: "${librispeech_dir:=${downloads}}"
data="${workdir}/data"
exp="${workdir}/exp"
mkdir -p "${exp}/logs" "${exp}/.done"
token_dir="${data}/token_list/bpe${bpe_size}"
asr_exp="${exp}/asr_$(basename "${asr_config}" .yaml)"
decode_dir="${asr_exp}/$(basename "${decode_config}" .yaml)${fusion_lm:+_lm_${fusion_lm}}"   # ESPnet: <asr_exp>/<inference_tag>
under() { echo "$1" | tr '-' '_'; }
eval_sets=""; for p in ${dev_parts} ${test_parts}; do eval_sets+=" $(under "${p}")"; done
[ "${ngpu}" -gt 0 ] && device=cuda || device=cpu

# run_stage N NAME: true when stage N is selected and not finished yet
run_stage() {
    local n=$1 name=$2
    if [ "${stage}" -gt "${n}" ] || [ "${stop_stage}" -lt "${n}" ]; then return 1; fi
    if [ -f "${exp}/.done/stage${n}" ]; then
        log "stage ${n} (${name}): already done (delete ${exp}/.done/stage${n} to redo)"; return 1
    fi
    log "stage ${n}: ${name}  (log: ${exp}/logs/stage${n}_${name}.log)"
    stage_log="${exp}/logs/stage${n}_${name}.log"
    stage_t0=$(date +%s)
    return 0
}
finish_stage() { touch "${exp}/.done/stage$1"; log "stage $1 done in $(( $(date +%s) - stage_t0 )) s"; }
# need N FILE...: the files an earlier stage N makes must exist
need() {
    local n=$1; shift
    for f in "$@"; do
        [ -e "${f}" ] || die "${f} is missing: run stage ${n} first (./run.sh --stage ${n} --stop_stage ${n} ...)"
    done
}

if run_stage 0 corpus; then
    if [ "${mini}" = true ]; then
        ${train_cmd} "${stage_log}" local/setup_mini.sh
        if [ "${micro}" = true ]; then sizes=(--train 60 --dev 6 --test 6); else sizes=(--train 1250 --dev 100 --test 100); fi
        ${train_cmd} "${stage_log%.log}_synth.log" python local/mini_corpus.py --out "${librispeech_dir}" \
            --nj "${nj}" "${sizes[@]}"
    else
        ${train_cmd} "${stage_log}" python local/download_librispeech.py --mirror "${mirror}" \
            --dir "${librispeech_dir}" --parts ${train_parts} ${dev_parts} ${test_parts} --lm-corpus
    fi
    finish_stage 0
fi

if run_stage 1 data; then
    corpus="${librispeech_dir}/LibriSpeech"
    need 0 "${corpus}"
    for part in ${train_parts} ${dev_parts} ${test_parts}; do need 0 "${corpus}/${part}"; done
    (
        set -e
        subsets=(); for part in ${train_parts}; do subsets+=("${corpus}/${part}"); done
        python local/data_prep.py --out "${data}/train" "${subsets[@]}"
        subsets=(); for part in ${dev_parts}; do subsets+=("${corpus}/${part}"); done
        python local/data_prep.py --out "${data}/dev" "${subsets[@]}"   # validation of the training
        for part in ${dev_parts} ${test_parts}; do
            python local/data_prep.py --out "${data}/$(under "${part}")" "${corpus}/${part}"
        done
    ) > "${stage_log}" 2>&1 || die "data preparation failed, see ${stage_log}: $(tail -n 3 "${stage_log}")"
    finish_stage 1
fi

if run_stage 2 bpe; then
    need 1 "${data}/train/text"
    mkdir -p "${token_dir}"
    cut -d' ' -f2- "${data}/train/text" > "${token_dir}/train_text.txt"
    ${train_cmd} "${stage_log}" python -m slm_lm.bin.train_bpe --text "${token_dir}/train_text.txt" \
        --vocab-size "${bpe_size}" --out "${token_dir}"
    finish_stage 2
fi

if run_stage 3 lm_text; then
    need 2 "${token_dir}/bpe.model"
    excludes=(); for s in ${eval_sets}; do need 1 "${data}/${s}/text"; excludes+=("${data}/${s}/text"); done
    if [ "${mini}" = true ] && [ "${lm_corpus}" = bible ]; then
        books=("${librispeech_dir}/books"); norm=(--valid-every 100 --max-words 60)
    elif [ "${mini}" = true ]; then
        books=("${MAIN_ROOT}/../shared/data/text/gutenberg"); norm=(--valid-every 1000)
    else
        books=("${librispeech_dir}/librispeech-lm-norm.txt.gz"); norm=(--normalized)
    fi
    need 0 "${books[@]}"
    mkdir -p "${data}/lm"
    ${train_cmd} "${stage_log}" sh -c '
        set -e
        python -m slm_lm.bin.prepare_lm_text --books "$@" --exclude '"${excludes[*]}"' \
            --out '"${data}"'/lm/train.txt --valid-out '"${data}"'/lm/valid.txt
        for x in train valid; do
            python -m slm_lm.espnet_lm.data '"${data}"'/lm/$x.txt '"${data}"'/lm/$x \
                --bpemodel '"${token_dir}"'/bpe.model --prefix lm_$x
        done' sh "${books[@]}" ${norm[@]+"${norm[@]}"}
    finish_stage 3
fi

if run_stage 4 asr_train; then
    need 2 "${token_dir}/tokens.txt"
    need 1 "${data}/train/wav.scp" "${data}/dev/wav.scp"
    common=(--use_preprocessor true --token_type bpe --bpemodel "${token_dir}/bpe.model"
            --token_list "${token_dir}/tokens.txt" --non_linguistic_symbols none --cleaner none --g2p none
            --train_data_path_and_name_and_type "${data}/train/wav.scp,speech,sound"
            --train_data_path_and_name_and_type "${data}/train/text,text,text"
            --valid_data_path_and_name_and_type "${data}/dev/wav.scp,speech,sound"
            --valid_data_path_and_name_and_type "${data}/dev/text,text,text"
            --config "${asr_config}" --frontend_conf fs=16k)
    stats="${exp}/asr_stats_bpe${bpe_size}"
    if [ ! -f "${stats}/train/feats_stats.npz" ]; then
        ${train_cmd} "${stage_log%.log}_stats.log" python -m espnet2.bin.asr_train --collect_stats true \
            "${common[@]}" --preprocessor_conf data_aug_prob=0.0 --ngpu 0 \
            --train_shape_file "${data}/train/wav.scp" --valid_shape_file "${data}/dev/wav.scp" \
            --output_dir "${stats}.tmp"
        rm -rf "${stats}"; mv "${stats}.tmp" "${stats}"
    fi
    # --resume true: a killed training continues from ${asr_exp}/checkpoint.pth
    OMP_NUM_THREADS="${train_threads:-${nj}}" ${cuda_cmd} "${asr_exp}/train.log" \
        python -m espnet2.bin.asr_train "${common[@]}" --ngpu "${ngpu}" --multiprocessing_distributed true --resume true \
        --train_shape_file "${stats}/train/speech_shape" --train_shape_file "${stats}/train/text_shape" \
        --valid_shape_file "${stats}/valid/speech_shape" --valid_shape_file "${stats}/valid/text_shape" \
        --normalize global_mvn --normalize_conf "stats_file=${stats}/train/feats_stats.npz" \
        --fold_length 80000 --fold_length 150 --output_dir "${asr_exp}" ${asr_train_args}
    need 4 "${asr_exp}/valid.acc.ave.pth"
    finish_stage 4
fi

if run_stage 5 lm_train; then
    need 3 "${data}/lm/train/text" "${data}/lm/valid/text"
    for kind in ${lm_kinds}; do
        conf="$(lm_conf "${kind}")"
        need 5 "${conf}"
        OMP_NUM_THREADS="${train_threads:-${nj}}" ${cuda_cmd} "${exp}/lm_${kind}/train.log" \
            python -m slm_lm.bin.lm_train --config "${conf}" --ngpu "${ngpu}" --multiprocessing_distributed true --resume true \
            --token_list "${token_dir}/tokens.txt" --bpemodel "${token_dir}/bpe.model" --token_type bpe \
            --train_data_path_and_name_and_type "${data}/lm/train/text,text,text" \
            --train_shape_file "${data}/lm/train/text_shape" \
            --valid_data_path_and_name_and_type "${data}/lm/valid/text,text,text" \
            --valid_shape_file "${data}/lm/valid/text_shape" --output_dir "${exp}/lm_${kind}" \
            --use_tensorboard false ${lm_train_args}
    done
    finish_stage 5
fi

if run_stage 6 decode; then
    need 4 "${asr_exp}/valid.acc.ave.pth"
    fusion=()
    if [ -n "${fusion_lm}" ]; then
        need 5 "${exp}/lm_${fusion_lm}/valid.loss.ave.pth"
        fusion=(--lm-config "${exp}/lm_${fusion_lm}/config.yaml" --lm-file "${exp}/lm_${fusion_lm}/valid.loss.ave.pth")
    fi
    for s in ${eval_sets}; do
        need 1 "${data}/${s}/wav.scp"
        ${decode_cmd} "${stage_log%.log}_${s}.log" python local/decode_nbest.py \
            --asr-config "${asr_exp}/config.yaml" --asr-model "${asr_exp}/valid.acc.ave.pth" \
            --decode-config "${decode_config}" --data "${data}/${s}" \
            --out "${decode_dir}/${s}" --nj "${nj}" --device "${device}" ${fusion[@]+"${fusion[@]}"}
    done
    finish_stage 6
fi

join_sets() { local out="" s; for s in "$@"; do out+="${out:+,}$s"; done; echo "${out}"; }
if run_stage 7 rescore; then
    devs=(); dev_refs=(); tests=(); test_refs=()
    for p in ${dev_parts}; do s=$(under "${p}"); need 6 "${decode_dir}/${s}/1best_recog/text"
        devs+=("${decode_dir}/${s}"); dev_refs+=("${data}/${s}/text"); done
    for p in ${test_parts}; do s=$(under "${p}"); need 6 "${decode_dir}/${s}/1best_recog/text"
        tests+=("${decode_dir}/${s}"); test_refs+=("${data}/${s}/text"); done
    for kind in ${lm_kinds}; do
        need 5 "${exp}/lm_${kind}/config.yaml"
        ${decode_cmd} "${stage_log%.log}_${kind}.log" python -m slm_lm.bin.rescore \
            --dev "$(join_sets "${devs[@]}")" --dev-ref "$(join_sets "${dev_refs[@]}")" \
            --test "$(join_sets "${tests[@]}")" --test-ref "$(join_sets "${test_refs[@]}")" \
            --lm "${exp}/lm_${kind}" --nbest 10 --am-weights "${am_weights}" \
            --lambda-range "${lambda_range}" --device "${device}" --no-progress \
            --cache "${exp}/lm_cache" --out "${exp}/rescore_${kind}"
    done
    finish_stage 7
fi

if run_stage 8 results; then
    rescored=(); for kind in ${lm_kinds}; do need 7 "${exp}/rescore_${kind}/tuning.json"; rescored+=("${kind}=${exp}/rescore_${kind}"); done
    ${train_cmd} "${stage_log}" python local/make_results.py --decode-dir "${decode_dir}" --data "${data}" \
        --sets "${eval_sets# }" --rescored "${rescored[@]}" --am-weights "${am_weights}" \
        --title "$( [ "${mini}" = true ] && echo "mini corpus (${tag})" || echo LibriSpeech-960 )" \
        --out "${workdir}/RESULTS.md"
    finish_stage 8
fi
[ -f "${workdir}/RESULTS.md" ] && [ "${stop_stage}" -ge 8 ] && cat "${workdir}/RESULTS.md"
log "finished stages ${stage}..${stop_stage}"
exit 0
}
