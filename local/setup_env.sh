#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv/ at the repo root.
# Usage: bash local/setup_env.sh      (idempotent: does nothing when .venv is up to date)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
python=${PYTHON:-python3}
# torch and torchaudio must match (espnet imports torchaudio); espnet 202511 needs setuptools<74.
# inflect<6: ESPnet imports it at every start (through its g2p, which slm_lm never calls); 7.x type-checks its
# functions at import, about 3 s of every ESPnet command's start on 2 cores, 5.6 imports in 0.1 s.
pins=("setuptools<74" "wheel" "torch==2.11.0" "torchaudio==2.11.0" "espnet==202511" "inflect<6")
stamp="$venv/.slm_lm_env"
want=$(cat "$root/setup.cfg" "$root/setup.py" "$0" | sha1sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setup_env: installing the environment in $venv (first run takes a few minutes)" >&2
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# Keep the venv's own pip: newer pips reject a dependency of espnet (a direct-URL extra of ci_sdr).
# --no-compile: Python writes a module's bytecode when it is first imported; most of the 17,000 files of torch,
# ESPnet and transformers never are, and compiling them all at install took about a minute on 2 cores.
"$venv/bin/pip" install -q --no-compile "${pins[@]}"
"$venv/bin/pip" install -q --no-compile --no-build-isolation -e "$root[espnet,hf,test]"
echo "$want" > "$stamp"
