#!/usr/bin/env bash
# Installs what the mini corpus needs when it is missing: espeak-ng, bible-kjv and sox
# (Debian/Ubuntu packages, via apt-get as root or with sudo). run.sh has checked the Python environment
# (local/check_python.py) before any stage runs.
set -euo pipefail
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

echo "$0: espeak-ng, bible-kjv and sox are ready"
