#!/usr/bin/env bash
# The stages of the recipe, sourced by run.sh after its settings (ESPnet's asr.sh called by run.sh): the
# options, then one block per stage, top to bottom. Each stage logs to ${exp}/logs/stage<N>_<name>.log or
# to its experiment directory.
#   0 corpus: download LibriSpeech (OpenSLR 12) + LM corpus (OpenSLR 11), or build the mini corpus
#   1 Kaldi-style data directories      2 BPE / token list (ASR and LMs share it, except a fine-tuned LM)
#   3 LM text, dev/test decontaminated  4 ASR training (ESPnet Conformer, collect-stats pass first)
#   5 LM training (SLM; CLM/MLM/Bi-LM with --lm_kinds; mini: fine-tuned from the shipped slm-books)
#   6 N-best decoding (Speech2Text, beam 10; --mwer_utts N: also N training utterances)
#   7 LM scoring + rescoring, lambda tuned on dev (--mwer_utts N: first the slm's MWER fine-tuning on their lists)
#   8 RESULTS.md (WER and CER: baseline, rescored, oracle)
#   9 pack (only when asked, --stage 9 --stop_stage 9): ESPnet's espnet2.bin.pack zip of the ASR model and the LMs
# As in ESPnet, every stage from --stage to --stop_stage runs. What a stage makes lives in a directory
# named by what made it (ESPnet's tags: exp/asr_<asr config>_raw_en_bpe<N>, exp/lm_<lm config>_en_bpe<N>,
# <asr_exp>/<inference tag>/<set>; --asr_train_args/--lm_train_args add ESPnet's args tag, e.g.
# exp/lm_train_lm_slm_mini_en_bpe300_max_epoch10); a finished one is reused by the same work, and nothing
# trained is ever renamed or deleted (local/reuse.sh).
{ # the braces make bash read the whole script first, so editing it during a run is harmless

stage=0
stop_stage=8
ngpu=0                 # GPUs per training job (ASR, LM)
gpu_inference=false    # true: each decoding / LM scoring job gets 1 GPU (ESPnet's default: CPU)
num_nodes=1            # nodes per training job (ESPnet's --num_nodes: DDP over num_nodes x ngpu GPUs through
                       # espnet2.bin.launch and srun; needs --cmd_backend slurm)
nj=2                   # jobs (key-file shards) of collect-stats and speed perturbation; synthesis processes
inference_nj=          # jobs (key-file shards) of decoding and LM scoring (default: --nj)
micro=false            # with --mini true: a few-minute smoke run (CI), conf/micro.sh
librispeech_dir=       # directory holding LibriSpeech/ (default: ${workdir}/downloads); an existing complete
                       # copy is only read (it may be read-only and shared)
lm_corpus_dir=         # LibriSpeech: where librispeech-lm-norm.txt.gz is or is downloaded to (default: --librispeech_dir)
mirror=https://www.openslr.org/resources   # or a local directory with 12/ and 11/ (offline testing)
data_mirror=           # --lm_corpus gutenberg: slm-data's --mirror for the books (default: their public sources)
inference_tag=         # decoding directory name (default: <decode config>_asr_model_<inference_asr_model>)
inference_asr_model=valid.acc.ave.pth  # the ASR checkpoint that decodes (e.g. valid.acc.best.pth, 10epoch.pth)
asr_train_args=        # extra options for espnet2.bin.asr_train (e.g. "--max_epoch 1"); part of the exp name
lm_train_args=         # extra options for slm_lm.bin.lm_train; part of the LM exp names (ESPnet's args tag)
mwer_utts=0            # N > 0: stage 6 also decodes N training utterances (a seeded draw, data/train_sub<N>),
                       # stage 7 fine-tunes stage 5's slm on their 10-best lists for minimum WER (slm-mwer-train,
                       # docs/mwer.md) and rescores dev/test with it, stage 8 adds its row (slm-mwer)
mwer_args=             # extra slm-mwer-train options (e.g. "--epochs 2"); part of its exp name (args tag)
fusion_lm=             # e.g. clm: decode with that stage-5 LM fused in the beam (weight: lm_weight of
                       # --decode_config, e.g. conf/decode_asr_lm.yaml); bidirectional kinds are refused
train_threads=         # CPU threads of a training job, local backend (default: --nj); on Slurm a job's
                       # threads are its CPUs (conf/slurm.conf, cmd.sh) per GPU
am_weights=            # AM score of a hypothesis = these weights x its per-scorer scores (default: the
                       # decoding weights, decoder=1-c,ctc=c with c the ctc_weight of --decode_config)
lambda_range="0:5:0.1"
cmd_backend=local      # local | slurm (see cmd.sh)
download_cmd=          # launcher of stage 0's LibriSpeech download (default: here, local/run_local.sh)
python=                # the Python of every step (ESPnet's --python); default: the active python3 when it
                       # imports espnet and slm_lm's packages, else the repository's .venv (made on first use)
help_message="Usage: $0 [options]
  --stage N --stop_stage N   run stages N..M (0 corpus, 1 data, 2 bpe, 3 lm_text, 4 asr_train,
                             5 lm_train, 6 decode, 7 rescore, 8 results, 9 pack: not by default, as
                             asr.sh's packing: --stage 9 --stop_stage 9 zips the ASR model, the LMs, their
                             configs and tokenizers into <asr_exp>/<asr_exp name>_<checkpoint>.zip with
                             espnet2.bin.pack); every selected stage runs,
                             finished identical work (same command and inputs) is reused, whatever the
                             resources (--ngpu, --nj, --num_nodes, threads); a finished training of other
                             work (edited config) stops the run: nothing trained is renamed or deleted
  settings                   run.sh's are LibriSpeech-960's; --mini true (the default) reads conf/mini.sh over
                             them, --micro true conf/micro.sh over both; an option given wins over every setting
  --mini true|false          offline mini corpus (default) or LibriSpeech-960 (--librispeech_dir DIR: an
                             existing copy is only read; --lm_corpus_dir DIR; --mirror URL|DIR;
                             --download_cmd LAUNCHER); --micro true: the CI smoke run
  --python PATH              the Python of every step (default: the active python3 if it has ESPnet and
                             slm_lm's packages, else the repository's .venv, made on first use)
  --lm_kinds 'slm clm mlm bilm tta'  --lm_size small|base  --asr_config YAML  --decode_config YAML
  --lm_init 'slm=slm-books'  mini: stage 5 fine-tunes the slm from the shipped slm-books ('' : from scratch)
  --lm_corpus librispeech|bible|gutenberg  stage 3's LM text (mini: bible; gutenberg: the shipped models'
                             books through slm-data, --data_mirror DIR: slm-data's --mirror)
  --bpe_size N  --bpemode unigram|bpe (default: unigram as asr.sh; mini: bpe, its published figures)
  --max_wav_duration S       LibriSpeech: training/validation utterances of S seconds or more are left
                             out (default 30, ESPnet's LibriSpeech; mini: none)
  tensorboard                LibriSpeech trainings write it (ESPnet's default) when the tensorboard
                             package is installed; without it they run with --use_tensorboard false
                             (a log line says so); the mini's trainings keep it off
  --speed_perturb_factors '0.9 1.0 1.1'  --inference_tag NAME  --workdir DIR  --asr_train_args '...'  --lm_train_args '...'
  --mwer_utts N  --mwer_args '...'  MWER fine-tuning of stage 5's slm on the 10-best lists of N training
                             utterances (stages 6-8; 0: none, the default); README, docs/mwer.md
  --fusion_lm clm            decode with stage 5's clm fused in the beam (shallow fusion; its weight:
                             lm_weight of --decode_config, e.g. conf/decode_asr_lm.yaml)
  --ngpu N                   GPUs per training job (DDP, --multiprocessing_distributed true)
  --gpu_inference true       decoding and LM scoring jobs get 1 GPU each (default: on CPU, as ESPnet)
  --inference_nj N           key-file shards of decoding and LM scoring (default: --nj)
  --inference_asr_model F    the ASR checkpoint that decodes (default: valid.acc.ave.pth)
  --num_nodes M              trainings on M nodes x N GPUs (espnet2.bin.launch: one sbatch --nodes M job
                             whose srun starts the DDP processes; --cmd_backend slurm)
  --nj N                     key-file shards (JOB=1:N jobs) of collect-stats and speed perturbation
  --cmd_backend local|slurm  local: jobs run here, in parallel; slurm: sbatch --wait, JOB=1:N as
                             job arrays (--array=1-N), GPUs as --gres=gpu:N (cmd.sh, local/run_slurm.sh)

Cluster (Slurm; partitions in conf/slurm.conf: CPU jobs to cpu, GPU jobs to gpu), LibriSpeech-960 on 4-GPU nodes:
  ./run.sh --mini false --librispeech_dir /data --cmd_backend slurm --ngpu 4 --nj 32 --gpu_inference true
    (slurm_partition=NAME: every job to that partition; each job's threads are its CPUs per GPU)
    stages 0, 2, 3, 8: one CPU job each (\${train_cmd}: --num_threads 4; the download runs here)
    stage 1: speed perturbation as 32 CPU array tasks
    stage 4: collect-stats as 32 CPU array tasks, then ASR training: one job, --gres=gpu:4
    stage 5: one job per LM kind, --gres=gpu:4
    stage 6: per set 32 array tasks (\${cuda_cmd} --gpu 1 JOB=1:32), each decodes one key file
    stage 7: per LM kind 32 scoring array tasks with 1 GPU each, merged here, then lambda tuning on CPU
  Array tasks are scheduled on any free node; a training job runs on one node (ESPnet --ngpu), or on
  --num_nodes M nodes (espnet2.bin.launch, srun). The launchers take ESPnet's utils/slurm.pl options
  (--num_threads --mem --max_jobs_run --name --num_nodes --config), and slurm.pl can replace them."

# The command line, then (--mini true, --micro true) the setting's file over run.sh's settings, then the
# command line again: an option given wins over every setting
args=("$@")
. ./local/parse_options.sh
case "${stage}" in ""|*[!0-9]*) echo "$0: error: --stage '${stage}': not a stage number (0-9)" >&2; exit 2 ;; esac
case "${stop_stage}" in ""|*[!0-9]*) echo "$0: error: --stop_stage '${stop_stage}': not a stage number (0-9)" >&2; exit 2 ;; esac
case "${mwer_utts}" in
    ""|*[!0-9]*) echo "$0: error: --mwer_utts '${mwer_utts}': not a number of utterances" >&2; exit 2 ;;
esac
if [ "${stage}" -gt "${stop_stage}" ]; then
    echo "$0: error: --stage ${stage} --stop_stage ${stop_stage}: no stage to run (stage > stop_stage)" >&2; exit 2
fi
# the settings' files set these
corpus_sizes=""; asr_text_shape=text_shape.bpe; asr_fixed_args=""; lm_fixed_args=""; mwer_fixed_args=""
if [ "${mini}" = true ]; then . conf/mini.sh; fi
if [ "${micro}" = true ] && [ "${mini}" = true ]; then . conf/micro.sh; fi
. ./local/parse_options.sh "${args[@]}"

# The Python environment: --python, else the active python3 when it has what the recipe imports, else the
# repository's .venv (local/setup_env.sh: created on first use, a quick no-op when up to date)
if [ -z "${python}" ]; then
    python=python3
    if ! python3 local/check_python.py 2>/dev/null; then
        bash ../../local/setup_env.sh
        python="$(cd ../.. && pwd)/.venv/bin/python"
    fi
fi
python_error=$("${python}" local/check_python.py 2>&1) || { echo "$0: --python ${python}: ${python_error}" >&2; exit 1; }
. ./path.sh
. ./cmd.sh
. ./local/reuse.sh
. ./local/launch.sh

# The options' checks, then the names that the stages read and make
if [ "${micro}" = true ] && [ "${mini}" != true ]; then die "--micro true needs --mini true"; fi
if [ "${num_nodes}" -gt 1 ] && [ "${cmd_backend}" != slurm ]; then die "--num_nodes ${num_nodes} needs --cmd_backend slurm"; fi
if [ "${mini}" != true ] && [ -n "${lm_init}" ]; then die "--lm_init: fine-tuning a shipped model is set up for the mini corpus only"; fi
for pair in ${lm_init}; do
    case "${pair}" in ?*=?*) ;; *) die "--lm_init: '${pair}' is not KIND=MODEL (e.g. slm=slm-books)" ;; esac
done
# lm_start KIND: the model that stage 5 fine-tunes KIND from (--lm_init), empty for none
lm_start() { local pair; for pair in ${lm_init}; do [ "${pair%%=*}" = "$1" ] && echo "${pair#*=}"; done; return 0; }
if [ -n "${fusion_lm}" ] && [ -n "$(lm_start "${fusion_lm}")" ]; then
    die "--fusion_lm ${fusion_lm}: shallow fusion needs the LM on the ASR's token list, but --lm_init fine-tunes it" \
        "from $(lm_start "${fusion_lm}") with that model's tokenizer; add --lm_init '' to train it from scratch"
fi
if [ "${mwer_utts}" -gt 0 ] && [[ " ${lm_kinds} " != *" slm "* ]]; then
    die "--mwer_utts ${mwer_utts}: the MWER fine-tuning starts from stage 5's slm; add slm to --lm_kinds"
fi
case "${bpemode}" in unigram|bpe) ;; *) die "--bpemode ${bpemode}: unigram or bpe" ;; esac
case "${max_wav_duration}" in none) ;; *[!0-9.]*|"") die "--max_wav_duration ${max_wav_duration}: seconds, or none" ;; esac
case "${lm_corpus}" in librispeech|bible|gutenberg) ;; *) die "--lm_corpus ${lm_corpus}: librispeech, bible or gutenberg" ;; esac
# lm_conf KIND: the LM's config (mini: conf/finetune_lm_<kind>_mini.yaml when fine-tuned)
lm_conf() {
    if [ "${mini}" != true ]; then echo "conf/tuning/train_lm_${1}_${lm_size}.yaml"
    elif [ -n "$(lm_start "$1")" ]; then echo "conf/finetune_lm_${1}_mini.yaml"
    else echo "conf/train_lm_${1}_mini.yaml"; fi
}
# tensorboard: on for the LibriSpeech trainings (ESPnet's default), off only where the package is absent; not
# part of the work's description (installing it later never redoes a training); the mini keeps it off
tensorboard=()
if [ "${mini}" != true ]; then
    if python -c "import tensorboard" 2>/dev/null; then tensorboard=(--use_tensorboard true)
    else tensorboard=(--use_tensorboard false); log "no tensorboard package: trainings run without it (pip install tensorboard)"; fi
fi
if [ -z "${am_weights}" ]; then
    [ -f "${decode_config}" ] || die "--decode_config ${decode_config}: not found"
    ctc_weight=$(awk '$1 == "ctc_weight:" { print $2 }' "${decode_config}")
    [ -n "${ctc_weight}" ] || die "${decode_config}: no ctc_weight line (needed for the default --am_weights)"
    am_weights="decoder=$(awk -v c="${ctc_weight}" 'BEGIN { print 1 - c }'),ctc=${ctc_weight}"
fi
tag=mini; [ "${micro}" = true ] && tag=micro
: "${librispeech_dir:=${workdir}/downloads}"
: "${lm_corpus_dir:=${librispeech_dir}}"
data="${workdir}/data"
exp="${workdir}/exp"
mkdir -p "${exp}/logs"
train_set=train; sp=""
if [ -n "${speed_perturb_factors}" ]; then train_set=train_sp; sp=_sp; fi
# ESPnet's token list directory (asr.sh: data/<lang>_token_list/bpe_<bpemode><nbpe>); the mini's BPE keeps
# the directory its finished stages name
if [ "${mini}" = true ] && [ "${bpemode}" = bpe ]; then token_dir="${data}/token_list/bpe${bpe_size}"
else token_dir="${data}/en_token_list/bpe_${bpemode}${bpe_size}"; fi
# args_tag ARGS: ESPnet's tag of extra training options ("--max_epoch 10" -> _max_epoch10)
args_tag() { echo "$1" | sed -e 's/--/_/g' -e 's/[ |=/]//g'; }
# ESPnet's experiment names: the config's name, the features, language and token type, the args tag
asr_exp="${exp}/asr_$(basename "${asr_config}" .yaml)_raw_en_bpe${bpe_size}$(args_tag "${asr_train_args}")${sp}"
asr_stats="${exp}/asr_stats_raw_en_bpe${bpe_size}${sp}"
asr_model=valid.acc.ave.pth
# a fine-tuned LM keeps its start's tokenizer: named after the start, not the recipe's BPE
lm_exp() { local start tokens="bpe${bpe_size}"; start=$(lm_start "$1")
           [ -n "${start}" ] && tokens=$(basename "${start}")
           echo "${exp}/lm_$(basename "$(lm_conf "$1")" .yaml)_en_${tokens}$(args_tag "${lm_train_args}")"; }
# lm_checkpoint DIR: the LM checkpoint that decoding and rescoring read (slm_lm.model.directory's order)
lm_checkpoint() { local f; for f in valid.loss.ave.pth valid.loss.best.pth latest.pth; do
                      [ -f "$1/${f}" ] && { echo "$1/${f}"; return 0; }; done; echo "$1/valid.loss.ave.pth"; }
# weight_files MODEL: the files holding the weights of MODEL (a shipped name or a model dir)
weight_files() {
    python -c 'import sys; from pathlib import Path; from slm_lm import pretrained
d = pretrained.path(sys.argv[1]) or Path(sys.argv[1])
print(*sorted(d.glob("model.*")) + sorted(d.glob("*.pth")), sep="\n")' "$1"
}
: "${inference_nj:=${nj}}"
# ESPnet's inference tag: decode config, fusion LM experiment and its checkpoint, ASR checkpoint
: "${inference_tag:=$(basename "${decode_config}" .yaml)${fusion_lm:+_lm_$(basename "$(lm_exp "${fusion_lm}")")_valid.loss.ave}\
_asr_model_$(echo "${inference_asr_model%.*}" | tr / _)}"
decode_dir="${asr_exp}/${inference_tag}"                  # <set>/<k>best_recog, <set>/score_wer
# the LMs that rescore (stage 7), by their names in RESULTS.md: --lm_kinds, then slm-mwer with --mwer_utts;
# rescorer_model NAME: its model dir, rescorer_done NAME: the .done of its training, rescore_dir NAME: its results
rescorers="${lm_kinds}"; if [ "${mwer_utts}" -gt 0 ]; then rescorers+=" slm-mwer"; fi
rescorer_model() { if [ "$1" = slm-mwer ]; then echo "${mwer_exp}/model"; else lm_exp "$1"; fi; }
rescorer_done() { if [ "$1" = slm-mwer ]; then echo "${mwer_exp}/.done"; else echo "$(lm_exp "$1")/.done"; fi; }
rescore_dir() { if [ "$1" = slm-mwer ]; then echo "${decode_dir}_rescore_${mwer_tag}"
                else echo "${decode_dir}_rescore_$(basename "$(lm_exp "$1")")"; fi; }
# --mwer_utts N: the training utterances that stage 6 decodes, the slm's MWER fine-tuning on their lists (stage 7)
mwer_set="train_sub${mwer_utts}"
mwer_tag="mwer${mwer_utts}_$(basename "$(lm_exp slm)")$(args_tag "${mwer_args}")"
mwer_exp="${decode_dir}_${mwer_tag}"                      # slm-mwer-train's --out: model/, curve.tsv, train.log
under() { echo "$1" | tr '-' '_'; }
join_sets() { local out="" s; for s in "$@"; do out+="${out:+,}$s"; done; echo "${out}"; }
eval_sets=""; for p in ${dev_parts} ${test_parts}; do eval_sets+=" $(under "${p}")"; done
test_sets=""; for p in ${test_parts}; do test_sets+=" $(under "${p}")"; done
decode_sets="${eval_sets}"; if [ "${mwer_utts}" -gt 0 ]; then decode_sets+=" ${mwer_set}"; fi
if [ "${gpu_inference}" = true ]; then
    device=cuda; infer_cmd="${cuda_cmd} --gpu 1"       # one GPU per decoding / scoring job
else
    device=cpu; infer_cmd="${decode_cmd} --gpu 0"
fi

if run_stage 0 corpus; then
    if [ "${mini}" = true ]; then
        read -r -a sizes <<< "${corpus_sizes}"
        desc=$(work mini_corpus "${sizes[@]}")
        mkdir -p "${librispeech_dir}"
        if ! reuse "${librispeech_dir}" "${desc}"; then
            ${train_cmd} "${stage_log}" local/setup_mini.sh
            ${train_cmd} "${stage_log%.log}_synth.log" python local/mini_corpus.py --out "${librispeech_dir}" \
                --nj "${nj}" "${sizes[@]}"
            finished "${librispeech_dir}" "${desc}" "${librispeech_dir}/split.json"
        fi
    else  # checks what is there by its files: quick when the corpus is complete; downloads run here
        # (compute nodes are often offline), as a job with e.g. --download_cmd 'local/run_slurm.sh --config conf/slurm.conf'
        ${download_cmd:-local/run_local.sh} "${stage_log}" python local/download_librispeech.py --mirror "${mirror}" \
            --dir "${librispeech_dir}" --parts ${train_parts} ${dev_parts} ${test_parts} --lm-corpus \
            --lm-dir "${lm_corpus_dir}"
    fi
    if [ "${lm_corpus}" = gutenberg ]; then  # the shipped models' books (slm-data), checked by their checksums
        ${train_cmd} "${stage_log%.log}_books.log" python -m slm_lm.bin.data get books --no-progress \
            ${data_mirror:+--mirror "${data_mirror}"}
    fi
    finish_stage 0
fi

if run_stage 1 data; then
    corpus="${librispeech_dir}/LibriSpeech"
    need 0 "${corpus}"
    for part in ${train_parts} ${dev_parts} ${test_parts}; do need 0 "${corpus}/${part}"; done
    (
        # every command ends in "|| exit 1": set -e has no effect in a subshell followed by ||
        subsets=(); for part in ${train_parts}; do subsets+=("${corpus}/${part}"); done
        python local/data_prep.py --out "${data}/train" "${subsets[@]}" || exit 1
        if [ -n "${speed_perturb_factors}" ]; then  # resumes: audio already written is kept
            # the resampling as nj jobs of the launcher (asr.sh's format_wav_scp.sh), then the directory here
            sp_opts=(--factors "${speed_perturb_factors}" --audio-dir "${workdir}/dump/speed_perturb")
            ${train_cmd} JOB=1:"${nj}" "${exp}/logs/speed_perturb.JOB.log" python local/speed_perturb.py \
                "${sp_opts[@]}" --shard JOB/"${nj}" "${data}/train" "${data}/train_sp" || exit 1
            python local/speed_perturb.py "${sp_opts[@]}" "${data}/train" "${data}/train_sp" || exit 1
        fi
        subsets=(); for part in ${dev_parts}; do subsets+=("${corpus}/${part}"); done
        python local/data_prep.py --out "${data}/dev" "${subsets[@]}" || exit 1   # validation of the training
        for part in ${dev_parts} ${test_parts}; do
            python local/data_prep.py --out "${data}/$(under "${part}")" "${corpus}/${part}" || exit 1
        done
    ) > "${stage_log}" 2>&1 || die "data preparation failed, see ${stage_log}: $(tail -n 3 "${stage_log}")"
    finish_stage 1
fi

if run_stage 2 bpe; then
    need 1 "${data}/train/text"
    mkdir -p "${token_dir}"
    # the model type in the description unless it is bpe (the recipe's tokenizer before --bpemode: such a
    # finished token list stays reused)
    mode=(); [ "${bpemode}" = bpe ] || mode=(--model-type "${bpemode}")
    desc=$(work train_bpe "${data}/train/text" "${bpe_size}" ${mode[@]+"${mode[@]}"})
    if ! reuse "${token_dir}" "${desc}"; then
        cut -d' ' -f2- "${data}/train/text" > "${token_dir}/train_text.txt"
        ${train_cmd} "${stage_log}" python -m slm_lm.bin.train_bpe --text "${token_dir}/train_text.txt" \
            --vocab-size "${bpe_size}" --model-type "${bpemode}" --out "${token_dir}"
        finished "${token_dir}" "${desc}" "${token_dir}/bpe.model" "${token_dir}/tokens.txt"
    fi
    finish_stage 2
fi

if run_stage 3 lm_text; then
    need 2 "${token_dir}/bpe.model"
    excludes=(); for s in ${eval_sets}; do need 1 "${data}/${s}/text"; excludes+=("${data}/${s}/text"); done
    case "${lm_corpus}" in
        bible) books=("${librispeech_dir}/books"); norm=(--valid-every 100 --max-words 60) ;;
        gutenberg) books=("$(python -m slm_lm.bin.data path books)"); norm=(--valid-every 1000) ;;
        librispeech) books=("${lm_corpus_dir}/librispeech-lm-norm.txt.gz"); norm=(--normalized) ;;
    esac
    need 0 "${books[@]}"
    mkdir -p "${data}/lm"
    desc=$(work lm_text "${books[@]}" ${norm[@]+"${norm[@]}"} "${excludes[@]}" "${token_dir}/bpe.model")
    if ! reuse "${data}/lm" "${desc}"; then
        ${train_cmd} "${stage_log}" sh -c '
            set -e
            python -m slm_lm.bin.prepare_lm_text --books "$@" --exclude '"${excludes[*]}"' \
                --out '"${data}"'/lm/train.txt --valid-out '"${data}"'/lm/valid.txt
            for x in train valid; do
                python -m slm_lm.espnet_lm.data '"${data}"'/lm/$x.txt '"${data}"'/lm/$x \
                    --bpemodel '"${token_dir}"'/bpe.model --prefix lm_$x
            done' sh "${books[@]}" ${norm[@]+"${norm[@]}"}
        finished "${data}/lm" "${desc}" "${data}/lm/train/text" "${data}/lm/valid/text" \
            "${data}/lm/train/text_shape" "${data}/lm/valid/text_shape"
    fi
    finish_stage 3
fi

if run_stage 4 asr_train; then
    need 2 "${token_dir}/tokens.txt"
    need 1 "${data}/${train_set}/wav.scp" "${data}/dev/wav.scp"
    common=(--use_preprocessor true --token_type bpe --bpemodel "${token_dir}/bpe.model"
            --token_list "${token_dir}/tokens.txt" --non_linguistic_symbols none --cleaner none --g2p none
            --train_data_path_and_name_and_type "${data}/${train_set}/wav.scp,speech,sound"
            --train_data_path_and_name_and_type "${data}/${train_set}/text,text,text"
            --valid_data_path_and_name_and_type "${data}/dev/wav.scp,speech,sound"
            --valid_data_path_and_name_and_type "${data}/dev/text,text,text"
            --config "${asr_config}" --frontend_conf fs=16k)
    inputs=("${data}/${train_set}/wav.scp" "${data}/${train_set}/text" "${data}/dev/wav.scp" "${data}/dev/text")
    # collect-stats, as ESPnet's asr.sh: nj key-file shards, then aggregated
    desc=$(work collect_stats "${common[@]}" "${inputs[@]}")
    mkdir -p "${asr_stats}"
    if ! reuse "${asr_stats}" "${desc}"; then
        logdir="${asr_stats}/logdir"
        _nj=$(min "${nj}" "$(min "$(wc -l < "${data}/${train_set}/wav.scp")" "$(wc -l < "${data}/dev/wav.scp")")")
        split_keys "${data}/${train_set}/wav.scp" "${logdir}/train" "${_nj}"
        split_keys "${data}/dev/wav.scp" "${logdir}/valid" "${_nj}"
        rm -rf "${logdir}"/stats.*
        ${train_cmd} JOB=1:"${_nj}" "${logdir}/stats.JOB.log" python -m espnet2.bin.asr_train \
            --collect_stats true "${common[@]}" --preprocessor_conf data_aug_prob=0.0 --ngpu 0 \
            --train_shape_file "${logdir}/train/keys.JOB" --valid_shape_file "${logdir}/valid/keys.JOB" \
            --output_dir "${logdir}/stats.JOB"
        stats_dirs=(); for ((j = 1; j <= _nj; j++)); do stats_dirs+=(--input_dir "${logdir}/stats.${j}"); done
        local/run_local.sh "${logdir}/aggregate.log" python -m espnet2.bin.aggregate_stats_dirs \
            "${stats_dirs[@]}" --output_dir "${asr_stats}"
        finished "${asr_stats}" "${desc}" "${asr_stats}/train/feats_stats.npz" \
            "${asr_stats}/train/speech_shape" "${asr_stats}/valid/speech_shape"
    fi
    # The shape files of the training, as asr.sh's stages 4 and 11 make them: text_shape.bpe is text_shape with
    # the token list's size appended ("uttid L,V"), so that batch_type numel counts L x V elements per
    # transcript beside its audio samples; with --max_wav_duration, the train and valid shapes keep only the
    # utterances shorter than that (the sampler draws its keys from the shape files: the others are not used)
    shapes="${asr_stats}"
    [ "${max_wav_duration}" = none ] || shapes="${asr_stats}/max_wav_duration${max_wav_duration}"
    for x in train valid; do
        mkdir -p "${shapes}/${x}"
        max_samples=$(awk -v d="${max_wav_duration}" 'BEGIN { print (d == "none") ? -1 : int(d * 16000) }')
        awk -v max="${max_samples}" -v v="$(wc -l < "${token_dir}/tokens.txt")" -v out="${shapes}/${x}" '
            FNR == 1 { file++ }
            file == 1 { if (max < 0 || $2 + 0 < max) { keep[$1] = 1; print > (out "/speech_shape.tmp") }; next }
            ($1 in keep) { print > (out "/text_shape.tmp"); print $0 "," v > (out "/text_shape.bpe.tmp") }
        ' "${asr_stats}/${x}/speech_shape" "${asr_stats}/${x}/text_shape"
        for f in speech_shape text_shape text_shape.bpe; do
            if [ "${shapes}" = "${asr_stats}" ] && [ "${f}" != text_shape.bpe ]; then rm "${shapes}/${x}/${f}.tmp"  # kept as made
            else mv "${shapes}/${x}/${f}.tmp" "${shapes}/${x}/${f}"; fi
        done
        [ -s "${shapes}/${x}/speech_shape" ] || die "${asr_stats}/${x}/speech_shape: no utterance shorter than --max_wav_duration ${max_wav_duration} s"
    done
    # the training command, in one place; --resume true: a killed training continues from checkpoint.pth
    asr_train=(python -m espnet2.bin.asr_train "${common[@]}" --multiprocessing_distributed true --resume true
        --train_shape_file "${shapes}/train/speech_shape" --train_shape_file "${shapes}/train/${asr_text_shape}"
        --valid_shape_file "${shapes}/valid/speech_shape" --valid_shape_file "${shapes}/valid/${asr_text_shape}"
        --normalize global_mvn --normalize_conf "stats_file=${asr_stats}/train/feats_stats.npz"
        --fold_length 80000 --fold_length 150 --output_dir "${asr_exp}" ${asr_fixed_args} ${asr_train_args})
    desc=$(work "${asr_train[@]}" "${inputs[@]}")
    if ! reuse "${asr_exp}" "${desc}"; then
        keep_trained "${asr_exp}" "${desc}"
        train "${asr_exp}" "${asr_train[@]}"
        finished "${asr_exp}" "${desc}" "${asr_exp}/${asr_model}" "${asr_exp}/config.yaml"
    fi
    finish_stage 4
fi

if run_stage 5 lm_train; then
    need 3 "${data}/lm/train/text" "${data}/lm/valid/text"
    for kind in ${lm_kinds}; do
        conf="$(lm_conf "${kind}")"
        need 5 "${conf}"
        lm_dir="$(lm_exp "${kind}")"
        lm_data="${data}/lm"; tokens=(--token_list "${token_dir}/tokens.txt" --bpemodel "${token_dir}/bpe.model")
        start="$(lm_start "${kind}")"
        if [ -n "${start}" ]; then
            # the start's weights for ESPnet's --init_param, its own tokenizer, and the LM text's
            # shapes counted in its pieces (stage 3 counted the recipe's)
            lm_data="${exp}/lm_init_${kind}_$(basename "${start}")"
            desc=$(work lm_init "${start}" $(weight_files "${start}") "${data}/lm/train.txt" "${data}/lm/valid.txt")
            if ! reuse "${lm_data}" "${desc}"; then
                mkdir -p "${lm_data}"
                ${train_cmd} "${lm_data}/init.log" sh -c '
                    set -e
                    python -m slm_lm.bin.init_slm --from "$1" --kind "$2" --format espnet --out "$3"
                    for x in train valid; do
                        python -m slm_lm.espnet_lm.data "$4/lm/$x.txt" "$3/$x" --bpemodel "$3/bpe.model" --prefix lm_$x
                    done' sh "${start}" "${kind}" "${lm_data}" "${data}"
                finished "${lm_data}" "${desc}" "${lm_data}/lm.pth" "${lm_data}/train/text_shape"
            fi
            tokens=(--token_list "${lm_data}/tokens.txt" --bpemodel "${lm_data}/bpe.model" --init_param "${lm_data}/lm.pth")
        fi
        # the training command, in one place; --resume true: a killed training continues
        lm_train=(python -m slm_lm.bin.lm_train --config "${conf}" --multiprocessing_distributed true --resume true
            "${tokens[@]}" --token_type bpe
            --train_data_path_and_name_and_type "${lm_data}/train/text,text,text"
            --train_shape_file "${lm_data}/train/text_shape"
            --valid_data_path_and_name_and_type "${lm_data}/valid/text,text,text"
            --valid_shape_file "${lm_data}/valid/text_shape" --output_dir "${lm_dir}"
            ${lm_fixed_args} ${lm_train_args})
        desc=$(work "${lm_train[@]}" "${lm_data}/train/text" "${lm_data}/valid/text")
        if ! reuse "${lm_dir}" "${desc}"; then
            keep_trained "${lm_dir}" "${desc}"
            train "${lm_dir}" "${lm_train[@]}"
            finished "${lm_dir}" "${desc}" "${lm_dir}/config.yaml"
        fi
    done
    finish_stage 5
fi

if run_stage 6 decode; then
    need 4 "${asr_exp}/${inference_asr_model}"
    fusion=()
    if [ -n "${fusion_lm}" ]; then
        need 5 "$(lm_exp "${fusion_lm}")/valid.loss.ave.pth"
        fusion=(--lm-config "$(lm_exp "${fusion_lm}")/config.yaml" --lm-file "$(lm_exp "${fusion_lm}")/valid.loss.ave.pth")
    fi
    if [ "${mwer_utts}" -gt 0 ]; then   # the same draw each time: its decoding is reused
        need 1 "${data}/train/wav.scp"
        python local/subset_data_dir.py --utts "${mwer_utts}" --seed 0 "${data}/train" "${data}/${mwer_set}"
    fi
    for s in ${decode_sets}; do
        need 1 "${data}/${s}/wav.scp"
        dir="${decode_dir}/${s}"; logdir="${dir}/logdir"
        decode=(python local/decode_nbest.py --asr-config "${asr_exp}/config.yaml"
                --asr-model "${asr_exp}/${inference_asr_model}" --decode-config "${decode_config}" --data "${data}/${s}" ${fusion[@]+"${fusion[@]}"})
        desc=$(work "${decode[@]}" "${data}/${s}/wav.scp" "${data}/${s}/text")
        if ! reuse "${dir}" "${desc}"; then
            redo "${dir}"
            # ESPnet's asr.sh: the keys split into nj shards, one job (and GPU) each, then merged
            _nj=$(min "${inference_nj}" "$(wc -l < "${data}/${s}/wav.scp")")
            split_keys "${data}/${s}/wav.scp" "${logdir}" "${_nj}"
            ${infer_cmd} JOB=1:"${_nj}" "${logdir}/decode.JOB.log" "${decode[@]}" \
                --keys "${logdir}/keys.JOB" --out "${logdir}/output.JOB" --device "${device}"
            # small merges and scoring run here, not as jobs in the queue
            local/run_local.sh "${logdir}/merge.log" python local/decode_nbest.py --merge "${_nj}" \
                --data "${data}/${s}" --out "${dir}"
            local/run_local.sh "${logdir}/score_wer.log" python local/score_wer.py --data "${data}/${s}" "${dir}"
            finished "${dir}" "${desc}" "${dir}/1best_recog/text" "${dir}/1best_recog/scores" "${dir}/text" \
                "${dir}/score_wer/ref.trn" "${dir}/score_wer/hyp.trn" "${dir}/score_wer/result.txt"
        fi
        log "${dir}: $(grep '^|Sum/Avg' "${dir}/score_wer/result.txt")"
    done
    finish_stage 6
fi

if run_stage 7 rescore; then
    devs=(); dev_refs=(); tests=(); test_refs=(); keys=()
    for p in ${dev_parts}; do s=$(under "${p}"); need 6 "${decode_dir}/${s}/.done"
        devs+=("${decode_dir}/${s}"); dev_refs+=("${data}/${s}/text"); keys+=("${data}/${s}/wav.scp"); done
    for p in ${test_parts}; do s=$(under "${p}"); need 6 "${decode_dir}/${s}/.done"
        tests+=("${decode_dir}/${s}"); test_refs+=("${data}/${s}/text"); keys+=("${data}/${s}/wav.scp"); done
    if [ "${mwer_utts}" -gt 0 ]; then
        # MWER: stage 5's slm fine-tuned on the training utterances' lists (lambda and early stopping on its
        # held-out speakers), as a training: resumed when killed, never replaced; then it rescores as the LMs do
        need 6 "${decode_dir}/${mwer_set}/.done"
        need 5 "$(lm_exp slm)/.done"
        mwer=(python -m slm_lm.bin.mwer_train --model "$(lm_exp slm)" --train "${decode_dir}/${mwer_set}"
              --train-ref "${data}/${mwer_set}/text" --nbest 10 --am-weights "${am_weights}"
              --lambda-range "${lambda_range}" --out "${mwer_exp}" ${mwer_fixed_args} ${mwer_args})
        desc=$(work "${mwer[@]}" "$(lm_exp slm)/.done" "${decode_dir}/${mwer_set}/.done")
        if ! reuse "${mwer_exp}" "${desc}"; then
            keep_trained "${mwer_exp}" "${desc}"
            mkdir -p "${mwer_exp}"
            OMP_NUM_THREADS="${train_threads:-${nj}}" ${cuda_cmd} --gpu "${ngpu}" "${mwer_exp}/train.log" "${mwer[@]}" \
                --device "$([ "${ngpu}" -gt 0 ] && echo cuda || echo cpu)" --no-progress
            finished "${mwer_exp}" "${desc}" "${mwer_exp}/model/training.json" "${mwer_exp}/curve.tsv"
        fi
        log "${mwer_exp}: $(grep '^stopped' "${mwer_exp}/train.log" | tail -n 1)"
    fi
    for kind in ${rescorers}; do
        lm_dir="$(rescorer_model "${kind}")"
        need 5 "$(rescorer_done "${kind}")"
        out="$(rescore_dir "${kind}")"; logdir="${out}/logdir"
        rescore=(python -m slm_lm.bin.rescore
            --dev "$(join_sets "${devs[@]}")" --dev-ref "$(join_sets "${dev_refs[@]}")"
            --test "$(join_sets "${tests[@]}")" --test-ref "$(join_sets "${test_refs[@]}")"
            --lm "${lm_dir}" --nbest 10 --am-weights "${am_weights}" --lambda-range "${lambda_range}")
        desc=$(work "${rescore[@]}" "$(rescorer_done "${kind}")" "${devs[@]/%//.done}" "${tests[@]/%//.done}")
        if ! reuse "${out}" "${desc}"; then
            redo "${out}"
            # LM scores of the N-best hypotheses: nj shards of the utterances, one job (and GPU) each,
            # merged into the score cache that the rescoring then reads
            mkdir -p "${logdir}"; sort "${keys[@]}" > "${logdir}/all_keys"
            _nj=$(min "${inference_nj}" "$(wc -l < "${logdir}/all_keys")")
            split_keys "${logdir}/all_keys" "${logdir}" "${_nj}"
            ${infer_cmd} JOB=1:"${_nj}" "${logdir}/lm_score.JOB.log" python local/score_nbest_lm.py \
                --lm "${lm_dir}" --nbest 10 --keys "${logdir}/keys.JOB" --device "${device}" \
                --cache "${logdir}/cache.JOB" "${devs[@]}" "${tests[@]}"
            local/run_local.sh "${logdir}/merge.log" python local/score_nbest_lm.py --merge "${_nj}" \
                --cache "${out}/lm_cache" "${logdir}"
            ${train_cmd} "${logdir}/rescore.log" "${rescore[@]}" --device cpu --no-progress \
                --cache "${out}/lm_cache" --out "${out}"
            for s in ${eval_sets}; do
                local/run_local.sh "${logdir}/score_wer.${s}.log" python local/score_wer.py --data "${data}/${s}" "${out}/${s}"
            done
            finished "${out}" "${desc}" "${out}/tuning.json" "${out}/RESULTS.md"
        fi
        for s in ${eval_sets}; do log "${out}/${s}: $(grep '^|Sum/Avg' "${out}/${s}/score_wer/result.txt")"; done
    done
    finish_stage 7
fi

if run_stage 8 results; then
    files=("ASR config=${asr_exp}/config.yaml" "ASR model=${asr_exp}/${inference_asr_model}" "decode config=${decode_config}")
    rescored=(); for kind in ${rescorers}; do
        need 7 "$(rescore_dir "${kind}")/.done"; rescored+=("${kind}=$(rescore_dir "${kind}")")
        if [ "${kind}" = slm-mwer ]; then files+=("slm-mwer LM model=${mwer_exp}/model")
        else files+=("${kind} LM config=$(lm_exp "${kind}")/config.yaml"
                     "${kind} LM model=$(lm_checkpoint "$(lm_exp "${kind}")")"); fi
    done
    ${train_cmd} "${stage_log}" python local/make_results.py --decode-dir "${decode_dir}" --data "${data}" \
        --sets "${eval_sets# }" --rescored "${rescored[@]}" --am-weights "${am_weights}" --pool "${test_sets# }" \
        --title "$( [ "${mini}" = true ] && echo "mini corpus (${tag})" || echo LibriSpeech-960 )" \
        --files "${files[@]}" --out "${workdir}/RESULTS.md"
    finish_stage 8
fi

if run_stage 9 pack; then
    # ESPnet's pack (asr.sh's "Pack model" stage, espnet2.bin.pack asr): one zip with the ASR model, its config,
    # feature statistics and tokenizer, the decoding config, RESULTS.md, and each LM of --lm_kinds (its config,
    # checkpoint and tokenizer; the --fusion_lm one as ESPnet's --lm_train_config/--lm_file). Inside, the
    # files keep their paths under the recipe directory, and unpacking rewrites the configs' paths to them.
    need 4 "${asr_exp}/.done" "${asr_exp}/${inference_asr_model}"
    packed="${asr_exp}/$(basename "${asr_exp}")_${inference_asr_model%.*}.zip"   # asr.sh's name
    pack=(--asr_train_config "${asr_exp}/config.yaml" --asr_model_file "${asr_exp}/${inference_asr_model}"
          --option "${asr_stats}/train/feats_stats.npz" --option "${token_dir}/bpe.model"
          --option "${token_dir}/tokens.txt" --option "${decode_config}")
    [ -f "${workdir}/RESULTS.md" ] && pack+=(--option "${workdir}/RESULTS.md")
    for kind in ${lm_kinds}; do
        lm_dir="$(lm_exp "${kind}")"
        need 5 "${lm_dir}/.done"
        if [ "${kind}" = "${fusion_lm}" ]; then
            pack+=(--lm_train_config "${lm_dir}/config.yaml" --lm_file "$(lm_checkpoint "${lm_dir}")")
        else
            pack+=(--option "${lm_dir}/config.yaml" --option "$(lm_checkpoint "${lm_dir}")")
        fi
        start="$(lm_start "${kind}")"   # a fine-tuned LM's own tokenizer
        [ -z "${start}" ] || pack+=(--option "${exp}/lm_init_${kind}_$(basename "${start}")/bpe.model"
                                    --option "${exp}/lm_init_${kind}_$(basename "${start}")/tokens.txt")
    done
    rm -f "${packed}"
    ${train_cmd} "${stage_log}" python -m espnet2.bin.pack asr "${pack[@]}" --outpath "${packed}"
    [ -s "${packed}" ] || die "${packed} was not made, see ${stage_log}"
    log "packed: ${packed}"
    finish_stage 9
fi
[ -f "${workdir}/RESULTS.md" ] && [ "${stage}" -le 8 ] && [ "${stop_stage}" -ge 8 ] && cat "${workdir}/RESULTS.md"
log "finished stages ${stage}..${stop_stage}"
exit 0
}
