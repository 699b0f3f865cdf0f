#!/usr/bin/env bash
# The recipe's reuse library, sourced by local/stages.sh. A finished piece of work holds DIR/.done: its
# description (the command's words, each existing input file followed by the md5 of its content), written
# after its outputs were checked. The same work again is reused whatever the resources (--ngpu, --nj,
# threads); other work is done; a training finished by other work is never renamed or deleted.

log() { echo "$(date '+%F %T') (run.sh) $*"; }
die() { echo "$(date '+%F %T') (run.sh) ERROR: $*" >&2; exit 1; }
# run_stage N NAME: true when stage N is selected (ESPnet: every selected stage runs)
run_stage() {
    local n=$1 name=$2
    if [ "${stage}" -gt "${n}" ] || [ "${stop_stage}" -lt "${n}" ]; then return 1; fi
    log "stage ${n}: ${name}  (log: ${exp}/logs/stage${n}_${name}.log)"
    stage_log="${exp}/logs/stage${n}_${name}.log"
    stage_t0=$(date +%s)
    return 0
}
finish_stage() { log "stage $1 done in $(( $(date +%s) - stage_t0 )) s"; }
# need N FILE...: the files an earlier stage N makes must exist
need() {
    local n=$1; shift
    for f in "$@"; do
        [ -e "${f}" ] || die "${f} is missing: run stage ${n} first (./run.sh --stage ${n} --stop_stage ${n} ...)"
    done
}
# work WORDS...: the description of a piece of work: its words one a line, each existing file
# followed by the md5 of its content (so that the same command on changed inputs is other work)
work() {
    local w
    for w in "$@"; do
        if [ -f "${w}" ]; then echo "${w} md5=$(md5sum < "${w}" | cut -d' ' -f1)"; else echo "${w}"; fi
    done
}
# done_work DIR: DIR/.done without resources (older recipes recorded the training's --ngpu)
done_work() { awk 'skip { skip = 0; next } $0 == "--ngpu" { skip = 1; next } { print }' "$1/.done"; }
# reuse DIR DESCRIPTION: true when DIR was finished by exactly this work (DIR/.done)
reuse() {
    if [ -f "$1/.done" ] && [ "$(done_work "$1")" = "$2" ]; then
        log "$1: reused (finished by the same work; delete $1/.done to redo it)"; return 0
    fi
    [ -f "$1/.done" ] && log "$1: made by other work (see $1/.done)"
    return 1
}
# keep_trained DIR DESCRIPTION: a training dir finished by other work is neither renamed, deleted nor
# overwritten: the run stops (a dir without .done is an interrupted run of this work: it resumes)
keep_trained() {
    [ -f "$1/.done" ] || return 0
    die "$1 holds a training finished by other work (its config or data changed):" \
        "$(diff <(done_work "$1") <(echo "$2") | grep '^[<>]' | head -n 4 | tr '\n' ' ')" \
        "-- it is kept as it is: train the new one under another name (e.g. an extra option in" \
        "--asr_train_args/--lm_train_args/--mwer_args, or another config file name), or delete $1/.done to continue it"
}
# redo DIR: results (not a training) made by other work are remade: DIR is emptied first, so that
# no shard of the other work is resumed
redo() {
    if [ -f "$1/.done" ]; then log "$1: remade"; rm -rf "$1"; fi
}
# finished DIR DESCRIPTION FILE...: check the outputs, then record DIR as finished by this work
finished() {
    local dir=$1 desc=$2 f; shift 2
    for f in "$@"; do [ -s "${f}" ] || die "${f} was not made (see the logs of ${dir})"; done
    printf '%s\n' "${desc}" > "${dir}/.done.tmp" && mv "${dir}/.done.tmp" "${dir}/.done"
}
# split_keys FILE DIR N: DIR/keys.1 .. DIR/keys.N, contiguous blocks of FILE's lines (N <= lines)
split_keys() {
    local total; total=$(wc -l < "$1")
    mkdir -p "$2"; rm -f "$2"/keys.*
    awk -v n="$3" -v total="${total}" -v d="$2" '{ print > (d "/keys." (int((NR - 1) * n / total) + 1)) }' "$1"
}
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
