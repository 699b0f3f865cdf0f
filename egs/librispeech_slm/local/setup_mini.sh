#!/usr/bin/env bash
# Installs what the mini corpus needs when it is missing: espeak-ng, bible-kjv and sox
# (Debian/Ubuntu packages, via apt-get as root or with sudo). The Python venv is made by run.sh
# (local/setup_env.sh at the repository root) before any stage runs.
set -euo pipefail
main_root="$(cd "$(dirname "$0")/../../.." && pwd)"

missing=()
command -v espeak-ng >/dev/null || missing+=(espeak-ng)
command -v bible >/dev/null || missing+=(bible-kjv)
command -v sox >/dev/null || missing+=(sox)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
        echo "$0: need ${missing[*]} but I am not root and sudo is absent; install them" >&2
        exit 1
    fi
    command -v apt-get >/dev/null || { echo "$0: no apt-get; install ${missing[*]} by hand" >&2; exit 1; }
    echo "$0: installing ${missing[*]}"
    "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 \
        install -y -qq --no-install-recommends "${missing[@]}"
fi

"${main_root}/.venv/bin/python" -c "import espnet2, sentencepiece, soundfile, kaldiio, jiwer" || {
    echo "$0: the venv at ${main_root}/.venv lacks packages; run: bash ${main_root}/local/setup_env.sh" >&2
    exit 1
}
echo "$0: espeak-ng, bible-kjv, sox and the Python venv are ready"
