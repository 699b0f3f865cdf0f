"""Sentencepiece BPE pieces mapped onto an ESPnet token list (`tokens.txt`).

Token-list layout (ESPnet, with sos = eos = the last index): ``<blank>`` (0, padding), ``<unk>`` (1),
the sentencepiece pieces, ``<mask>`` (V-2), ``<sos/eos>`` (V-1). ``<mask>`` is used only by the sliding,
masked and T-TA LMs; a list without it (as ESPnet's asr.sh writes) is valid too.  Text is encoded as it is given:
normalise it first (`slm_lm.data.text_norm.normalize_librispeech`) as the training text was.
"""

import hashlib
import os
from pathlib import Path

import sentencepiece as spm

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import decode_utf8, read_small_file, write_atomic

__all__ = ["Tokenizer", "read_token_list", "check_token_list", "check_unknown", "BLANK", "UNK", "MASK", "SOS_EOS",
           "BPE_MODEL_FILE", "TOKEN_LIST_FILE", "UNKNOWN_CHOICES"]

BLANK, UNK, MASK, SOS_EOS = "<blank>", "<unk>", "<mask>", "<sos/eos>"
_LAYOUT = ((0, BLANK), (1, UNK), (-1, SOS_EOS))
BPE_MODEL_FILE, TOKEN_LIST_FILE = "bpe.model", "tokens.txt"
# What encoding does with text the tokenizer does not know: raise InputError, or map it to <unk>.
UNKNOWN_CHOICES = ("error", "unk")


def check_unknown(unknown: str) -> str:
    """`unknown` if it is one of `UNKNOWN_CHOICES`, else ValueError."""
    if unknown not in UNKNOWN_CHOICES:
        raise ValueError(f"unknown must be 'error' or 'unk', got {unknown!r}")
    return unknown


def check_token_list(tokens: list, source: str = "token list") -> list:
    """Check the layout (specials in place, `<mask>` second to last if present, no empty or duplicate
    tokens); returns `tokens`."""
    layout = f"layout is {BLANK}, {UNK}, pieces..., [{MASK},] {SOS_EOS}"
    if len(tokens) < 4:
        raise InputError(f"{source}: {len(tokens)} tokens; {layout}")
    seen = {}
    for line, token in enumerate(tokens, 1):
        if not token or token != token.strip() or " " in token:
            raise InputError(f"{source}:{line}: empty token or token with whitespace: {token!r}")
        if token in seen:
            raise InputError(f"{source}:{line}: duplicate token {token!r} (first on line {seen[token]})")
        seen[token] = line
    for index, expected in _LAYOUT:
        if tokens[index] != expected:
            where = seen.get(expected)
            found = f"it is on line {where}" if where else "it is missing"
            raise InputError(f"{source}:{index % len(tokens) + 1}: expected {expected!r} here, found "
                             f"{tokens[index]!r} ({found}); {layout}")
    if seen.get(MASK, len(tokens) - 1) != len(tokens) - 1:
        raise InputError(f"{source}:{seen[MASK]}: {MASK} must be second to last (line {len(tokens) - 1}); {layout}")
    return tokens


def read_token_list(path) -> list:
    """Read and check an ESPnet token list file (one token per line)."""
    text = decode_utf8(path, read_small_file(path, "token list"))
    return check_token_list(text.splitlines(), str(path))


class Tokenizer:
    """Sentencepiece model + token list: text <-> token-list indices."""

    def __init__(self, bpe_model, token_list):
        """`token_list`: a list of tokens or the path of a `tokens.txt`."""
        if isinstance(token_list, (str, os.PathLike)):
            self.token_list = read_token_list(token_list)
        else:
            self.token_list = check_token_list(list(token_list))
        model_bytes = read_small_file(bpe_model, "sentencepiece model")
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.load_from_serialized_proto(model_bytes)
        except RuntimeError as e:
            raise InputError(f"{bpe_model}: not a sentencepiece model: {e}") from None
        self._model_bytes = model_bytes
        index = {token: i for i, token in enumerate(self.token_list)}
        self.vocab_size = len(self.token_list)
        self.pad_id, self.unk_id = 0, 1
        self.mask_id = self.vocab_size - 2 if self.token_list[-2] == MASK else None
        self.bos_id = self.eos_id = self.vocab_size - 1
        self._sp_unk = self.sp.unk_id()
        self._to_id, missing = [], []
        for sp_id in range(self.sp.get_piece_size()):
            if self.sp.is_unknown(sp_id) or self.sp.is_control(sp_id):
                self._to_id.append(self.unk_id)
                continue
            piece = self.sp.id_to_piece(sp_id)
            if piece not in index:
                missing.append(piece)
            self._to_id.append(index.get(piece, self.unk_id))
        if missing:
            raise InputError(f"{bpe_model}: {len(missing)} pieces of the sentencepiece model are not in the "
                             f"token list (first: {missing[:5]}); the two files do not belong together")
        self._to_sp = {our: sp_id for sp_id, our in enumerate(self._to_id) if our != self.unk_id}
        pieces_end = -1 if self.mask_id is None else -2
        extra = [t for i, t in enumerate(self.token_list[2:pieces_end], 2) if i not in self._to_sp]
        if extra:
            raise InputError(f"{bpe_model}: {len(extra)} tokens of the token list are not pieces of the "
                             f"sentencepiece model (first: {extra[:5]}); the two files do not belong together")
        self._to_sp[self.unk_id] = self._sp_unk

    @classmethod
    def from_dir(cls, directory) -> "Tokenizer":
        """Load `bpe.model` and `tokens.txt` from `directory`."""
        directory = Path(directory)
        return cls(directory / BPE_MODEL_FILE, directory / TOKEN_LIST_FILE)

    def save(self, directory) -> None:
        """Write `bpe.model` and `tokens.txt` into `directory` (each atomically)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(directory / BPE_MODEL_FILE, self._model_bytes)
        write_atomic(directory / TOKEN_LIST_FILE, ("\n".join(self.token_list) + "\n").encode("utf-8"))

    def digest(self) -> str:
        """16 hex digits identifying this tokenizer: the sentencepiece model and the token list."""
        digest = hashlib.sha1(self._model_bytes)
        digest.update("\n".join(self.token_list).encode())
        return digest.hexdigest()[:16]

    def encode(self, text: str, unknown: str = "error") -> list:
        """Token-list indices of the pieces of `text` (no boundary tokens).

        A character the model does not know raises InputError naming it (`unknown="error"`) or
        becomes `<unk>` (`unknown="unk"`).
        """
        check_unknown(unknown)
        sp_ids = self.sp.encode(text)
        if unknown == "error" and self._sp_unk in sp_ids:
            proto = self.sp.encode(text, out_type="immutable_proto")
            chars = [p.surface for p in proto.pieces if p.id == self._sp_unk]
            raise InputError(f"unknown character(s) {''.join(chars)!r} in {text[:80]!r}: not in the BPE model")
        to_id = self._to_id
        return [to_id[i] for i in sp_ids]

    def pieces(self, text: str) -> list:
        """Sentencepiece pieces of `text` (strings, '▁' marks a word start)."""
        return self.sp.encode(text, out_type=str)

    def word_start_ids(self) -> list:
        """Per token id, True if that token begins a word: pieces starting with '▁' and every special
        token (`<blank>`, `<unk>`, `<mask>`, `<sos/eos>`), which stand alone."""
        special = {self.pad_id, self.unk_id, self.mask_id, self.eos_id}
        return [i in special or piece.startswith("▁") for i, piece in enumerate(self.token_list)]

    def id_to_piece(self, token_id: int) -> str:
        """The token-list entry at `token_id`."""
        return self.token_list[token_id]

    def decode(self, ids) -> str:
        """Text of token-list indices; `<blank>`, `<mask>` and `<sos/eos>` are skipped, `<unk>` shows as ' ⁇ '."""
        sp_ids = []
        for position, token_id in enumerate(ids):
            token_id = int(token_id)
            if not 0 <= token_id < self.vocab_size:
                raise InputError(f"token id {token_id} at position {position} is outside 0..{self.vocab_size - 1}")
            if token_id in (self.pad_id, self.mask_id, self.eos_id):
                continue
            sp_ids.append(self._to_sp[token_id])
        return self.sp.decode(sp_ids)
