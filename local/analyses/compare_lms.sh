#!/usr/bin/env bash
# Equal-budget comparison of slm / clm / mlm / bilm / tta, one command:
#   bash local/analyses/compare_lms.sh [OUT_DIR]          (default exp/compare; finished steps are skipped)
# 1. decontaminated LM text from the books of slm-data get books (dev transcripts excluded) and BPE;
# 2. a training subset (every TRAIN_EVERY-th sentence) in ESPnet's format;
# 3. the five kinds trained with the same budget (conf/compare/train_lm_cpu.yaml, local/analyses/train_compare_cpu.sh);
# 4. each model (local/analyses/eval_lm.sh): BLiMP, dev N-best rescoring in both directions (tune on one dev set,
#    report the other), held-out cross-entropy (pseudo for MLM); 5. the table: OUT_DIR/comparison.md.
# Scale knobs (environment; the defaults reproduce the table in RESULTS.md):
#   BOOKS=DIR          book text (default: the data directory's, slm-data get books; the N-best lists and
#                      BLiMP come from there too: slm-data get librispeech-nbest blimp)
#   BPE_SIZE=5000      VALID_EVERY=1000 (every N-th sentence is held out)
#   TRAIN_EVERY=20     (train on every N-th training sentence)      VALID_LINES=1000 (held-out lines used)
#   LM_TRAIN_ARGS=...  extra slm-lm-train options for every kind (e.g. "--num_iters_per_epoch 5")
#   NBEST_EVERY=10     evaluate on every N-th dev utterance (1 = the full dev sets)
#   BLIMP_LIMIT=100    first N pairs of each BLiMP paradigm (all = every pair)
#   PYTHON=PATH        the Python of every step (default: the checkout's .venv, local/setup_env.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/exp/compare}
bpe_size=${BPE_SIZE:-5000}
valid_every=${VALID_EVERY:-1000}
train_every=${TRAIN_EVERY:-20}
valid_lines=${VALID_LINES:-1000}
nbest_every=${NBEST_EVERY:-10}
blimp_limit=${BLIMP_LIMIT:-100}
py=${PYTHON:-$root/.venv/bin/python}
books=${BOOKS:-$($py -m slm_lm.bin.data path books)}
kinds="slm clm mlm bilm tta"  # the rows of the table, in local/analyses/compare_table.py's order
nbest=$($py -m slm_lm.bin.data path librispeech-nbest)
text=$out/lm_text
mkdir -p "$out"
cd "$root"

if [ ! -f "$text/train.txt" ]; then
  $py -m slm_lm.bin.prepare_lm_text --books "$books" --valid-every "$valid_every" \
    --exclude "$nbest/dev_clean/references/ref_wer.trn" "$nbest/dev_other/references/ref_wer.trn" --out "$text/train.txt"
fi
[ -f "$text/bpe/tokens.txt" ] || $py -m slm_lm.bin.train_bpe --text "$text/train.txt" --vocab-size "$bpe_size" --out "$text/bpe"
if [ ! -f "$out/data/valid/text_shape" ]; then
  mkdir -p "$out/data"
  awk -v n="$train_every" 'NR % n == 0' "$text/train.txt" > "$out/data/train_sub.txt"
  head -n "$valid_lines" "$text/valid.txt" > "$out/data/valid_sub.txt"
  $py -m slm_lm.espnet_lm.data "$out/data/train_sub.txt" "$out/data/train" --bpemodel "$text/bpe/bpe.model"
  $py -m slm_lm.espnet_lm.data "$out/data/valid_sub.txt" "$out/data/valid" --bpemodel "$text/bpe/bpe.model" --prefix valid
fi
untrained=""
for kind in $kinds; do [ -e "$out/models/$kind/valid.loss.ave.pth" ] || untrained+=" $kind"; done
[ -z "$untrained" ] || bash local/analyses/train_compare_cpu.sh "$out/data" "$text/bpe" "$out/models" "$untrained"

# MLM pseudo-log-likelihood costs n passes per sentence: the default table (CPU session) evaluates every model
# on every 10th dev utterance and the first 100 pairs of each BLiMP paradigm; NBEST_EVERY=1 BLIMP_LIMIT=all
# evaluates on everything.
eval_nbest=$nbest
if [ "$nbest_every" != 1 ]; then
  eval_nbest=$out/nbest_every$nbest_every
  for set in dev_clean dev_other; do
    [ -f "$eval_nbest/$set/references/ref_wer.trn" ] || \
      $py -m slm_lm.bin.subset_nbest "$nbest/$set" "$eval_nbest/$set" --every "$nbest_every"
  done
fi
[ "$blimp_limit" = all ] && blimp_limit=""
for kind in $kinds; do
  NBEST=$eval_nbest BLIMP_LIMIT=$blimp_limit bash local/analyses/eval_lm.sh "$out/models/$kind" "$out/data/valid_sub.txt" \
    "$out/eval/$kind" "$kind (CPU budget)"
done
$py local/analyses/compare_table.py "$out" > "$out/comparison.md.tmp" && mv "$out/comparison.md.tmp" "$out/comparison.md"
cat "$out/comparison.md"
