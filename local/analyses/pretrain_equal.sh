#!/usr/bin/env bash
# Pre-train several LM kinds side by side with the same budget (slm-pretrain train), one process each.
# Usage: bash local/analyses/pretrain_equal.sh DATA_DIR RUN_DIR "KIND[:n_layers] ..." [slm-pretrain train options]
#   DATA_DIR: train.ids.xz, valid.ids.xz, bpe.model, tokens.txt (slm-pretrain encode); logs in RUN_DIR/KIND.
#   Re-running resumes every kind from its checkpoint; a finished kind exits at once.
set -euo pipefail
data=$1 run=$2 kinds=$3
shift 3
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
mkdir -p "$run"
pids=()
for spec in $kinds; do
  kind=${spec%%:*}
  layers=()
  [ "$spec" != "$kind" ] && layers=(--n-layers "${spec#*:}")
  mkdir -p "$run/$kind"
  "$python" -m slm_lm.bin.pretrain train --kind "$kind" --data "$data" --out "$run/$kind" "$@" "${layers[@]}" \
    >> "$run/$kind/train.log" 2>&1 &
  pids+=("$!")
done
failed=""
set -- $kinds
for pid in "${pids[@]}"; do
  wait "$pid" || failed+=" ${1%%:*} (see $run/${1%%:*}/train.log)"
  shift
done
[ -z "$failed" ] || { echo "$0: training failed:$failed" >&2; exit 1; }
