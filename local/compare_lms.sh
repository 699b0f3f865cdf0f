#!/usr/bin/env bash
# Equal-budget comparison of slm / clm / mlm / bilm (issue: "reproduce the paper's analyses"), one command:
#   bash local/compare_lms.sh [OUT_DIR]          (default exp/compare; finished steps are skipped)
# 1. decontaminated LM text from ../shared/data/text/gutenberg (dev transcripts excluded) and BPE 5000;
# 2. a training subset (every 20th sentence) in ESPnet's format;
# 3. the four kinds trained with the same budget (conf/compare/train_lm_cpu.yaml, local/train_compare_cpu.sh);
# 4. each model (local/eval_lm.sh): BLiMP, dev N-best rescoring in both directions (tune on one dev set,
#    report the other), held-out cross-entropy (pseudo for MLM); 5. the table: OUT_DIR/comparison.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/exp/compare}
shared=${SHARED:-$root/../shared}
py=$root/.venv/bin/python
nbest=$shared/data/librispeech_nbest
export SHARED=$shared
text=$out/lm_text
mkdir -p "$out"
cd "$root"

if [ ! -f "$text/train.txt" ]; then
  $py -m slm_lm.bin.prepare_lm_text --books "$shared/data/text/gutenberg" \
    --exclude "$nbest/dev_clean/references/ref_wer.trn" "$nbest/dev_other/references/ref_wer.trn" --out "$text/train.txt"
fi
[ -f "$text/bpe/tokens.txt" ] || $py -m slm_lm.bin.train_bpe --text "$text/train.txt" --vocab-size 5000 --out "$text/bpe"
if [ ! -f "$out/data/valid/text_shape" ]; then
  mkdir -p "$out/data"
  awk 'NR % 20 == 0' "$text/train.txt" > "$out/data/train_sub.txt"
  head -n 1000 "$text/valid.txt" > "$out/data/valid_sub.txt"
  $py -m slm_lm.espnet_lm.data "$out/data/train_sub.txt" "$out/data/train" --bpemodel "$text/bpe/bpe.model"
  $py -m slm_lm.espnet_lm.data "$out/data/valid_sub.txt" "$out/data/valid" --bpemodel "$text/bpe/bpe.model" --prefix valid
fi
bash local/train_compare_cpu.sh "$out/data" "$text/bpe" "$out/models"

# MLM pseudo-log-likelihood costs n passes per sentence: to keep the four-way table within a CPU session,
# every model is evaluated on every 10th dev utterance and the first 100 pairs of each BLiMP paradigm.
for set in dev_clean dev_other; do
  [ -f "$out/nbest_every10/$set/references/ref_wer.trn" ] || \
    $py local/subset_nbest.py "$nbest/$set" "$out/nbest_every10/$set" --every 10
done
for kind in slm clm mlm bilm; do
  NBEST=$out/nbest_every10 BLIMP_LIMIT=100 bash local/eval_lm.sh "$out/models/$kind" "$out/data/valid_sub.txt" "$out/eval/$kind" "$kind (CPU budget)"
done
$py local/compare_table.py "$out" > "$out/comparison.md.tmp" && mv "$out/comparison.md.tmp" "$out/comparison.md"
cat "$out/comparison.md"
