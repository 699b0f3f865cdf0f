#!/usr/bin/env bash
# Minimal option parser (in the spirit of Kaldi's utils/parse_options.sh, own code):
# every `--some_name value` (or `--some-name value`) on the command line sets the shell
# variable `some_name`, which must already exist (declared with its default by the caller).
# `--help` prints the variables the caller declared in `help_message`.
while [ $# -gt 0 ]; do
    case "$1" in
        --help|-h) echo "${help_message:-no help}"; exit 0 ;;
        --*=*) _name="${1%%=*}"; _value="${1#*=}"; shift ;;
        --*) _name="$1"; [ $# -ge 2 ] || { echo "$0: option $1 needs a value" >&2; exit 1; }
             _value="$2"; shift 2 ;;
        *) break ;;
    esac
    _name="${_name#--}"; _name="${_name//-/_}"
    if ! declare -p "${_name}" >/dev/null 2>&1; then
        echo "$0: unknown option --${_name} (see --help)" >&2; exit 1
    fi
    printf -v "${_name}" '%s' "${_value}"
done
unset _name _value
