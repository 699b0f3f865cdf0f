"""The pre-training corpus: encoding text into it, reading it back, and its sentences packed into rows.

Format (`encode_corpus`): the token ids of every sentence, pieces only, each sentence followed by 0
(`<blank>`, never a piece), as little-endian uint16, lzma-compressed: `NAME.ids.xz`; beside it
`NAME.ids.json` records the tokenizer that encoded it (`Tokenizer.digest()`) and the corpus's own digest.
`load_corpus` given a tokenizer refuses a corpus whose record names another tokenizer, and any corpus with
a token id beyond that tokenizer's vocabulary; a corpus without the record (encoded before it existed) is
accepted without the tokenizer check. `pack_rows` packs the sentences whole into rows of one length, `PackedRows`
holds the packed tokens and sentence numbers (`slm_lm.model.backbone`) of an epoch as tensors.
"""
import hashlib
import json
import lzma
import os
import random
from pathlib import Path

import numpy as np
import torch

from slm_lm.model.backbone import PADDING
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


def pack_rows(lengths: list, row_length: int, rng: random.Random | None = None, open_rows: int = 8) -> list:
    """Index lists of sentences (`lengths`: each one's tokens, `<s>` and `</s>` included, at most `row_length`)
    that fill rows of `row_length` tokens: every sentence once and whole. The sentences are taken in a random
    order (`rng`; None: in order), each put into the first of the last `open_rows` rows it fits in, or a new one.
    """
    order = list(range(len(lengths)))
    if rng is not None:
        rng.shuffle(order)
    rows, room, first_open = [], [], 0
    for i in order:
        size = lengths[i]
        for r in range(first_open, len(rows)):
            if room[r] >= size:
                rows[r].append(i)
                room[r] -= size
                break
        else:
            rows.append([i])
            room.append(row_length - size)
            first_open = max(first_open, len(rows) - open_rows)
    return rows


class Sentences:
    """Sentences as two tensors on `device`: `pieces` (every sentence's pieces, one after another) and `starts`
    [n + 1] (where each begins, the end last), so that an epoch is packed there, all sentences at once."""

    def __init__(self, sentences: list, device="cpu"):
        pieces = np.concatenate(sentences) if sentences else np.zeros(0, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum([len(x) for x in sentences], dtype=np.int64)])
        self.pieces = torch.from_numpy(pieces.astype(np.int32)).to(device)
        self.starts = torch.from_numpy(starts).to(device)
        self.lengths = np.diff(starts).tolist()  # each sentence's pieces, on the host

    def __len__(self) -> int:
        return len(self.lengths)


class PackedRows:
    """The `sentences` (`Sentences`) of `rows` (index lists, `pack_rows`) as `<s> pieces </s>` packed into `tokens`
    [R, L] and their sentence numbers `sentences` [R, L] (PADDING after each row's last sentence), built on the
    sentences' device, with the rows grouped into batches of `rows_per_batch` (the last one filled with rows of
    padding: every batch has one shape) and each batch's number of predicted tokens `predicted` (every token but
    each sentence's `<s>`), on the host. Pieces beyond `row_length` - 2 are cut (a model has no position for them).
    """

    def __init__(self, sentences: Sentences, rows: list, row_length: int, rows_per_batch: int, sos_eos: int):
        device = sentences.pieces.device
        batches = -(-len(rows) // rows_per_batch)
        per_row = torch.tensor([len(row) for row in rows], device=device)
        order = torch.from_numpy(np.fromiter((i for row in rows for i in row), dtype=np.int64,
                                             count=sum(len(row) for row in rows))).to(device)
        begins = sentences.starts[order]
        size = (sentences.starts[order + 1] - begins).clamp(max=row_length - 2) + 2
        row_of = torch.repeat_interleave(torch.arange(len(rows), device=device), per_row)
        first = per_row.cumsum(0) - per_row  # each row's first sentence
        number = torch.arange(len(order), device=device) - first[row_of]  # each sentence's number in its row
        before = size.cumsum(0) - size  # tokens before each sentence, all rows
        column = before - before[first][row_of]  # each sentence's first column in its row
        offset = torch.arange(int(size.sum()), device=device) - before.repeat_interleave(size)  # place in its sentence
        inner = (offset > 0) & (offset < (size - 1).repeat_interleave(size))
        source = torch.where(inner, (begins - 1).repeat_interleave(size) + offset, 0)
        flat = (row_of * row_length + column).repeat_interleave(size) + offset
        tokens = torch.zeros(batches * rows_per_batch * row_length, dtype=torch.int32, device=device)
        numbers = torch.full_like(tokens, PADDING)
        tokens[flat] = torch.where(inner, sentences.pieces[source], sos_eos)
        numbers[flat] = number.to(torch.int32).repeat_interleave(size)
        self.tokens = tokens.view(batches, rows_per_batch, row_length)
        self.sentences = numbers.view(batches, rows_per_batch, row_length)
        predicted = torch.zeros(batches * rows_per_batch, dtype=torch.int64, device=device)
        predicted.index_add_(0, row_of, size - 1)
        self.predicted = predicted.view(batches, rows_per_batch).sum(dim=1).tolist()

    def __len__(self) -> int:
        return len(self.predicted)

    def __getitem__(self, batch: int):
        """(tokens [rows_per_batch, L], sentences [rows_per_batch, L]) of batch `batch`, int64, on the device."""
        return self.tokens[batch].long(), self.sentences[batch].long()
