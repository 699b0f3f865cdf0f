#!/usr/bin/env bash
# Usage: run_local.sh LOG command [args...]
# Runs the command here; stdout and stderr go to LOG (and a header/footer with the time and
# exit status, as Kaldi's run.pl); returns the command's exit status.
set -u
[ $# -ge 2 ] || { echo "usage: $0 LOG command [args...]" >&2; exit 1; }
log="$1"; shift
mkdir -p "$(dirname "${log}")"
{ echo "# $*"; echo "# started at $(date)"; } > "${log}"
"$@" >> "${log}" 2>&1
rc=$?
echo "# ended (rc=${rc}) at $(date)" >> "${log}"
if [ ${rc} -ne 0 ]; then
    echo "$0: command failed (rc=${rc}), see ${log}:" >&2
    tail -n 15 "${log}" >&2
fi
exit ${rc}
