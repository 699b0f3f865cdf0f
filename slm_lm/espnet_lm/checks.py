"""Checks of ESPnet LM-training inputs (token list, text and shape files) -> `InputError`.

No ESPnet import here.
"""
import argparse
import sys

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import read_text_lines
from slm_lm.model.config import MASK_KINDS
from slm_lm.model.tokenizer import MASK, check_token_list
from slm_lm.model.tokenizer import read_token_list as read_tokens_file

# Tokens an utterance takes beyond its pieces: <sos/eos> on both sides.
BOUNDARY_TOKENS = 2


def config_source(args: argparse.Namespace) -> str:
    """How to name the configuration in messages: the YAML file when there is one."""
    return f"config {args.config}" if getattr(args, "config", None) else "command line"


def read_token_list(token_list) -> list:
    """ESPnet's `--token_list`: a file path, or the list stored in an experiment's config.yaml; checked."""
    if isinstance(token_list, (list, tuple)):
        return check_token_list(list(token_list), "token_list")
    return read_tokens_file(token_list)


def kind_token_list(kind: str, token_list) -> list:
    """The token list an LM of `kind` trains with: `token_list` checked; for the kinds that use `<mask>`,
    it is inserted before `<sos/eos>` when missing (an asr.sh token list). The other ids do not move."""
    tokens = read_token_list(token_list)
    if kind in MASK_KINDS and tokens[-2] != MASK:
        tokens = [*tokens[:-1], MASK, tokens[-1]]
    return tokens


def check_mask_token(kind: str, token_list, lm_conf, source: str) -> None:
    """For the kinds that use `<mask>`: the id the model will use as `<mask>` (`lm_conf` mask_id, by default
    the id before `<sos/eos>`) must hold `<mask>` in `token_list`, else `InputError`."""
    if kind not in MASK_KINDS:
        return
    tokens = read_token_list(token_list)
    mask_id = (lm_conf or {}).get("mask_id", -1)
    if not isinstance(mask_id, int) or isinstance(mask_id, bool) or mask_id >= len(tokens):
        return  # LMConfig refuses it with its own message
    if mask_id < 0:
        mask_id = len(tokens) - 2
    if tokens[mask_id] != MASK:
        raise InputError(f"{source}: --lm {kind}: lm_conf mask_id {mask_id} is {tokens[mask_id]!r} in the token "
                         f"list, not {MASK}; leave mask_id out ({MASK} is then the token before <sos/eos>)")


def read_shape_file(path: str, max_tokens: int) -> dict:
    """{utterance id: line number} of an ESPnet shape file (`uttid length[,dim]`), lengths checked."""
    lines = {}
    for number, line in read_text_lines(path):
        parts = line.split()
        if len(parts) != 2:
            raise InputError(f"{path}:{number}: expected 'utterance_id length', got {line!r}")
        uttid, shape = parts
        try:
            length = int(shape.split(",")[0])
        except ValueError:
            raise InputError(f"{path}:{number}: length {shape!r} is not an integer") from None
        if length > max_tokens:
            raise InputError(
                f"{path}:{number}: utterance {uttid} has {length} tokens; the model takes at most {max_tokens} "
                f"(max_positions minus {BOUNDARY_TOKENS}): split or remove it in data preparation"
            )
        if uttid in lines:
            raise InputError(f"{path}:{number}: utterance {uttid} repeats line {lines[uttid]}")
        lines[uttid] = number
    if not lines:
        raise InputError(f"{path}: empty shape file")
    return lines


def check_text_file(path: str, needed: dict, shape_path: str) -> None:
    """An ESPnet text file (`uttid text` per line, UTF-8) holding each utterance `needed` exactly once; lines of
    utterances the shape file lacks (ESPnet never trains on them) are counted in a warning on stderr."""
    found, unused = set(), []
    for number, line in read_text_lines(path):
        parts = line.split(maxsplit=1)
        if not parts:
            raise InputError(f"{path}:{number}: empty line; expected 'utterance_id text'")
        if len(parts) == 1:
            raise InputError(f"{path}:{number}: utterance {parts[0]} has no text")
        if parts[0] in needed:
            if parts[0] in found:
                raise InputError(f"{path}:{number}: utterance {parts[0]} appears twice")
            found.add(parts[0])
        elif needed:
            unused.append((number, parts[0]))
    missing = [uttid for uttid in needed if uttid not in found]
    if missing:
        raise InputError(
            f"{shape_path}:{needed[missing[0]]}: utterance {missing[0]} is not in {path} "
            f"({len(missing)} utterance(s) missing)"
        )
    if unused:
        number, uttid = unused[0]
        print(f"slm_lm: warning: {path}:{number}: utterance {uttid} is not in {shape_path}: {len(unused)} of the "
              f"file's lines are not trained on (ESPnet batches the shape file's utterances)", file=sys.stderr)


def check_data(args: argparse.Namespace, max_tokens: int) -> None:
    """Text files readable and well formed; every shape-file utterance present and short enough."""
    for mode in ("train", "valid"):
        entries = getattr(args, f"{mode}_data_path_and_name_and_type")
        shape_files = getattr(args, f"{mode}_shape_file")
        text_entries = [path for path, name, _ in entries if name == "text"]
        if not text_entries:
            raise InputError(f"--{mode}_data_path_and_name_and_type: no 'text' entry (expected PATH,text,text)")
        for path, name, kind in entries:
            if kind != "text":
                raise InputError(f"--{mode}_data_path_and_name_and_type {path},{name},{kind}: type must be 'text'")
        if args.collect_stats:
            for path in text_entries:
                check_text_file(path, {}, "")
            continue
        if not shape_files:
            raise InputError(f"--{mode}_shape_file is required (ESPnet batches by the lengths it lists)")
        needed = read_shape_file(shape_files[0], max_tokens)
        check_text_file(text_entries[0], needed, shape_files[0])
