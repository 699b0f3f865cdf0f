"""The pre-training corpus: encoding text into it, reading it back, and batches of sentences of similar length.

Format (`encode_corpus`): the token ids of every sentence, pieces only, each sentence followed by 0
(`<blank>`, never a piece), as little-endian uint16, lzma-compressed: `NAME.ids.xz`; beside it
`NAME.ids.json` records the tokenizer that encoded it (`Tokenizer.digest()`) and the corpus's own digest.
`load_corpus` given a tokenizer refuses a corpus whose record names another tokenizer, and any corpus with
a token id beyond that tokenizer's vocabulary; a corpus without the record (encoded before it existed) is
accepted without the tokenizer check. Batches (`batches`, `collate`) are sentences of similar length under a
padded-token budget, as ESPnet's `numel` batches.
"""
import hashlib
import json
import lzma
import os
import random
from pathlib import Path

import numpy as np
import torch

from slm_lm.common.errors import InputError, os_problem
from slm_lm.common.fileio import MAX_TEXT_FILE, atomic_open, read_small_file, read_text_lines
from slm_lm.common.progress import progress_bar
from slm_lm.model.tokenizer import Tokenizer


def record_path(corpus) -> Path:
    """`NAME.ids.json`, the record beside the corpus `NAME.ids.xz` (see the module's docstring)."""
    corpus = Path(corpus)
    name = corpus.name[: -len(".xz")] if corpus.name.endswith(".xz") else corpus.name
    return corpus.with_name(name + ".json")


def encode_corpus(text, tokenizer: Tokenizer, out, max_sentences: int = 0) -> dict:
    """Encode `text` (one normalised sentence a line) into `out` (.ids.xz) and its record (`record_path`);
    returns counts. A text without a sentence is refused.

    With `max_sentences`, only the first that many lines are encoded (a subset small enough to travel).
    """
    if tokenizer.vocab_size > 65535:
        raise InputError(f"vocabulary of {tokenizer.vocab_size} does not fit uint16 ids")
    ids, sentences = [], 0
    lines = read_text_lines(text)
    try:
        first = next(lines, None)
        if first is None:  # refused before the progress bar starts: the message is the only line
            raise InputError(f"{text}: no sentence to encode (the text is empty)")
        with progress_bar(_chain(first, lines), desc=f"encode {Path(text).name}", unit="sent") as numbered:
            for number, line in numbered:
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
    finally:
        lines.close()
    return write_corpus(np.asarray(ids, dtype="<u2"), tokenizer, out)


def write_corpus(ids: np.ndarray, tokenizer: Tokenizer, out) -> dict:
    """Write `ids` (every sentence's pieces followed by 0) to `out` (.ids.xz) and its record; returns counts."""
    sentences = int(np.count_nonzero(ids == 0))
    data = lzma.compress(np.asarray(ids, dtype="<u2").tobytes(), preset=9 | lzma.PRESET_EXTREME)
    record = {"tokenizer": tokenizer.digest(), "vocab_size": tokenizer.vocab_size, "sentences": sentences,
              "corpus_sha1": hashlib.sha1(data).hexdigest()}
    try:  # both written before either replaces anything: a full disk leaves neither
        with atomic_open(record_path(out)) as record_file, atomic_open(out, "wb") as corpus_file:
            corpus_file.write(data)
            record_file.write(json.dumps(record, indent=1) + "\n")
            corpus_file.flush()
            record_file.flush()
    except OSError as e:
        raise InputError(f"{out}: cannot write: {os_problem(e, out)}") from None
    return {"sentences": sentences, "pieces": int(len(ids) - sentences), "bytes": os.path.getsize(out)}


def _chain(first, rest):
    yield first
    yield from rest


def load_corpus(path, tokenizer: Tokenizer | None = None) -> list:
    """Sentences of an `.ids.xz` corpus as a list of int64 numpy arrays (pieces only).

    Given the `tokenizer` it is to be used with: a corpus whose record (`record_path`) names another
    tokenizer, or that holds a token id beyond its vocabulary, is refused (InputError naming the corpus).
    A corpus without a record (encoded before records existed) is accepted without the tokenizer check.
    """
    array = read_ids(path, tokenizer).astype(np.int64)
    ends = np.flatnonzero(array == 0)
    starts = np.concatenate([[0], ends[:-1] + 1])
    return [array[s:e] for s, e in zip(starts, ends)]


def read_ids(path, tokenizer: Tokenizer | None = None) -> np.ndarray:
    """The ids of an `.ids.xz` corpus as written (uint16, each sentence followed by 0), checked as `load_corpus`
    says."""
    path = Path(path)
    data = read_small_file(path, "encoded corpus", MAX_TEXT_FILE)
    try:
        raw = lzma.decompress(data)
    except lzma.LZMAError as e:
        raise InputError(f"{path}: cannot read the encoded corpus: {e}") from None
    if len(raw) % 2:
        raise InputError(f"{path}: {len(raw):,} bytes once decompressed, an odd number: not an encoded corpus "
                         "(2-byte token ids)")
    array = np.frombuffer(raw, dtype="<u2")
    if len(array) == 0 or array[-1] != 0:
        raise InputError(f"{path}: not an encoded corpus (must end with a 0 separator)")
    if tokenizer is not None:
        check_tokenizer(path, data, tokenizer)
        largest = int(array.max())
        if largest >= tokenizer.vocab_size:
            raise InputError(f"{path}: token id {largest} is beyond the vocabulary of {tokenizer.vocab_size} of "
                             "the tokenizer it is used with (encoded with another tokenizer?)")
    return array


def check_tokenizer(path: Path, data: bytes, tokenizer: Tokenizer) -> None:
    """Refuse the corpus `path` (its bytes: `data`) if its record names a tokenizer other than `tokenizer`
    or describes another corpus; a corpus without a record is not checked."""
    record = record_path(path)
    if not record.exists():
        return
    try:
        saved = json.loads(record.read_text(encoding="utf-8"))
        digest, corpus_sha1 = saved["tokenizer"], saved["corpus_sha1"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{record}: cannot read the record of {path.name}: {e}") from None
    if corpus_sha1 != hashlib.sha1(data).hexdigest():
        raise InputError(f"{record}: describes another corpus than {path.name} (one of them was replaced); "
                         "encode the text again")
    if digest != tokenizer.digest():
        raise InputError(f"{path}: encoded with another tokenizer (digest {digest}, recorded in {record.name}) "
                         f"than the one it is used with (digest {tokenizer.digest()}); encode the text again "
                         "with that tokenizer")


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
