#!/usr/bin/env bash
# Train slm, clm, mlm, bilm and tta with the same CPU budget (conf/compare/train_lm_cpu.yaml), one thread each,
# all at once, on the decontaminated shared book text prepared as in BENCHMARKS.md / RESULTS.md.
# Usage: [LM_TRAIN_ARGS="..."] bash local/analyses/train_compare_cpu.sh DATA_DIR BPE_DIR OUT_DIR [kinds]
#   DATA_DIR has train/{text,text_shape} and valid/{text,text_shape} (python -m slm_lm.espnet_lm.data);
#   LM_TRAIN_ARGS are extra slm-lm-train options given to every kind (the budget stays equal); PYTHON is the
#   Python of the trainings (default: the checkout's .venv, local/setup_env.sh).
set -euo pipefail
data=$1 bpe=$2 out=$3 kinds=${4:-"slm clm mlm bilm tta"}
root=$(cd "$(dirname "$0")/../.." && pwd)
conf=$root/egs/librispeech_slm/conf/compare/train_lm_cpu.yaml
mkdir -p "$out"
pids=()
for kind in $kinds; do
  mkdir -p "$out/$kind"
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 "${PYTHON:-$root/.venv/bin/python}" -m slm_lm.bin.lm_train --config "$conf" --lm "$kind" --ngpu 0 \
    --token_list "$bpe/tokens.txt" --bpemodel "$bpe/bpe.model" --token_type bpe \
    --train_data_path_and_name_and_type "$data/train/text,text,text" --train_shape_file "$data/train/text_shape" \
    --valid_data_path_and_name_and_type "$data/valid/text,text,text" --valid_shape_file "$data/valid/text_shape" \
    --resume true --output_dir "$out/$kind" ${LM_TRAIN_ARGS:-} >> "$out/$kind/train.log" 2>&1 &
  pids+=("$!")
done
failed=""
set -- $kinds
for pid in "${pids[@]}"; do
  wait "$pid" || failed+=" $1 (see $out/$1/train.log)"
  shift
done
[ -z "$failed" ] || { echo "$0: training failed:$failed" >&2; exit 1; }
