#!/usr/bin/env bash
# Evaluate one LM: BLiMP, LibriSpeech dev 10-best rescoring in both directions (lambda tuned on one dev set,
# applied to the other), held-out scores. Finished steps are skipped.
# Usage: [NBEST=DIR] [BLIMP_LIMIT=N] bash local/analyses/eval_lm.sh MODEL HELDOUT_TEXT OUT_DIR [LABEL]
#   MODEL: anything slm_lm.scoring.scorer.load_scorer accepts; OUT_DIR gets blimp/, tune_dev_*/, heldout.tsv.
#   NBEST: a folder with dev_clean/ and dev_other/ N-best sets (default: those of slm-data get librispeech-nbest;
#   BLiMP too comes from the data directory, slm-data get blimp);
#   BLIMP_LIMIT: only the first N pairs of each BLiMP paradigm (default: all);
#   CACHE: the LM score cache (default OUT_DIR/lm_cache; several models may share one);
#   WHOLE_WORDS=1: score with --whole-words (each word left to right given the whole words around it);
#   PYTHON: the Python of every step (default: the checkout's .venv, local/setup_env.sh).
set -euo pipefail
model=$1 heldout=$2 out=$3 label=${4:-$(basename "$1")}
ww=${WHOLE_WORDS:+--whole-words}
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
nbest=${NBEST:-$($py -m slm_lm.bin.data path librispeech-nbest)}
mkdir -p "$out"
[ -f "$out/heldout.tsv" ] || $py -m slm_lm.bin.score --model "$model" $ww --input "$heldout" --output "$out/heldout.tsv"
for pair in "dev_clean dev_other" "dev_other dev_clean"; do
  set -- $pair
  [ -f "$out/tune_$1/tuning.json" ] || $py -m slm_lm.bin.rescore --dev "$nbest/$1" --test "$nbest/$2" \
    --lm "$model" $ww --nbest 10 --am-weights decoder=0.6,ctc=0.4 --lambda-range 0:5:0.1 \
    --cache "${CACHE:-$out/lm_cache}" --out "$out/tune_$1" --no-progress
done
[ -f "$out/blimp/blimp_results.json" ] || $py -m slm_lm.bin.blimp --model "$model" $ww --out "$out/blimp" \
  --label "$label" ${BLIMP_LIMIT:+--limit "$BLIMP_LIMIT"} --no-progress
