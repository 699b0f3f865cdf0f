"""The pre-training corpus: encoding text into it, reading it back, and batches of sentences of similar length.

Format (`encode_corpus`): the token ids of every sentence, pieces only, each sentence followed by 0
(`<blank>`, never a piece), as little-endian uint16, lzma-compressed: `NAME.ids.xz`.  Batches
(`batches`, `collate`) are sentences of similar length under a padded-token budget, as ESPnet's `numel`
batches.
"""
import lzma
import os
import random
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from slm_lm.errors import InputError
from slm_lm.fileio import atomic_open
from slm_lm.tokenizer import Tokenizer


def encode_corpus(text, tokenizer: Tokenizer, out, max_sentences: int = 0) -> dict:
    """Encode `text` (one normalised sentence a line) into `out` (.ids.xz); returns counts.

    With `max_sentences`, only the first that many lines are encoded (a subset small enough to travel).
    """
    if tokenizer.vocab_size > 65535:
        raise InputError(f"vocabulary of {tokenizer.vocab_size} does not fit uint16 ids")
    ids, sentences = [], 0
    with open(text, encoding="utf-8-sig") as handle:
        for number, line in enumerate(tqdm(handle, desc=f"encode {Path(text).name}", unit="sent"), 1):
            if max_sentences and sentences == max_sentences:
                break
            line = line.strip()
            if not line:
                raise InputError(f"{text}:{number}: empty line")
            try:
                pieces = tokenizer.encode(line)
            except InputError as e:
                raise InputError(f"{text}:{number}: {e}") from None
            ids.extend(pieces)
            ids.append(0)
            sentences += 1
    array = np.asarray(ids, dtype="<u2")
    with atomic_open(out, "wb") as handle:
        handle.write(lzma.compress(array.tobytes(), preset=9 | lzma.PRESET_EXTREME))
    return {"sentences": sentences, "pieces": int(len(array) - sentences), "bytes": os.path.getsize(out)}


def load_corpus(path) -> list:
    """Sentences of an `.ids.xz` corpus as a list of int64 numpy arrays (pieces only)."""
    try:
        array = np.frombuffer(lzma.decompress(Path(path).read_bytes()), dtype="<u2").astype(np.int64)
    except (OSError, lzma.LZMAError) as e:
        raise InputError(f"{path}: cannot read the encoded corpus: {e}") from None
    if len(array) == 0 or array[-1] != 0:
        raise InputError(f"{path}: not an encoded corpus (must end with a 0 separator)")
    ends = np.flatnonzero(array == 0)
    starts = np.concatenate([[0], ends[:-1] + 1])
    return [array[s:e] for s, e in zip(starts, ends)]


def batches(lengths: list, max_tokens: int, rng: random.Random, pool: int = 100):
    """Index lists of sentences of similar length; each batch pads to at most `max_tokens` tokens.

    The order is shuffled, then sorted by length inside pools of about `pool` batches, and the
    batches are shuffled: every sentence is used once per pass.
    """
    order = list(range(len(lengths)))
    rng.shuffle(order)
    mean = max(1, sum(lengths) // max(1, len(lengths)))
    chunk = max(1, pool * max_tokens // mean)
    out = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: lengths[i])
        batch = []
        for i in part:  # ascending lengths: the newest sentence is the longest
            if batch and (len(batch) + 1) * lengths[i] > max_tokens:
                out.append(batch)
                batch = []
            batch.append(i)
        if batch:
            out.append(batch)
    rng.shuffle(out)
    return out


def collate(sentences: list, index: list, sos_eos: int, max_positions: int):
    """(tokens [B, T], lengths [B]) for `<s> pieces </s>` rows, pieces cut to fit `max_positions`."""
    rows = [sentences[i][: max_positions - 2] for i in index]
    n = np.array([len(r) for r in rows])
    tokens = np.zeros((len(rows), int(n.max()) + 2), dtype=np.int64)
    row_of = np.repeat(np.arange(len(rows)), n)
    column = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + 1
    tokens[row_of, column] = np.concatenate(rows)
    tokens[:, 0] = sos_eos
    tokens[np.arange(len(rows)), n + 1] = sos_eos
    return torch.from_numpy(tokens), torch.from_numpy(n + 2)
