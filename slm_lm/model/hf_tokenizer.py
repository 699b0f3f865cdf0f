"""A Hugging Face tokenizer behind slm_lm's `Tokenizer` interface, for SLMs initialised from BERT/RoBERTa
(`slm_lm.pretrain.init_from_mlm`), and the case options of Hugging Face models.

Tokenizers are read from a local directory only (`local_files_only`): nothing is downloaded. Hugging Face models
are cased; text is passed through unchanged unless `case` asks for "lower" (all lower case) or "sentence" (lower
case, first letter and the pronoun "I" upper case; the choice for upper-case ASR N-best text with cased models).
"""
import hashlib
import json
import re
from pathlib import Path

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import read_json
from slm_lm.model.tokenizer import check_unknown

CASES = ("as-is", "lower", "sentence")
_PRONOUN_I = re.compile(r"(?<![\w'])i(?=$|[^\w']|'(?:m|d|ll|ve)\b)")


def apply_case(text: str, case: str) -> str:
    """`text` as-is, lower-cased, or sentence-cased (lower, then first letter and "I" upper)."""
    if check_case(case) == "as-is":
        return text
    text = text.lower()
    if case == "lower":
        return text
    text = _PRONOUN_I.sub("I", text)
    for i, char in enumerate(text):
        if char.isalpha():
            return text[:i] + char.upper() + text[i + 1 :]
    return text


def check_case(case: str) -> str:
    """`case` if it is one of `CASES`, else ValueError."""
    if case not in CASES:
        raise ValueError(f"case must be one of {CASES}, got {case!r}")
    return case


def hf_model_dir(path) -> Path:
    """`path` as a Path; InputError unless it is a directory."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: Hugging Face model directory not found")
    return path


class HFTokenizer:
    """A Hugging Face tokenizer with the `slm_lm.model.tokenizer.Tokenizer` interface.

    Ids are the Hugging Face ids: `bos_id`/`eos_id` are [CLS]/[SEP] (RoBERTa <s>/</s>; GPT-2
    <|endoftext|> for both), `pad_id`, `unk_id`, `mask_id` the tokenizer's own. `case` is applied by
    `encode` (see the module docstring).
    """

    kind = "hf"

    def __init__(self, hf_tokenizer, case: str = "as-is", source: str = "tokenizer"):
        self.hf = hf_tokenizer
        self.case = check_case(case)
        self.vocab_size = len(hf_tokenizer)
        first = lambda *ids: next((i for i in ids if i is not None), None)  # noqa: E731
        self.bos_id = first(hf_tokenizer.cls_token_id, hf_tokenizer.bos_token_id)
        self.eos_id = first(hf_tokenizer.sep_token_id, hf_tokenizer.eos_token_id)
        if self.bos_id is None or self.eos_id is None:
            raise InputError(f"{source}: the tokenizer defines no [CLS]/<s> or [SEP]/</s> token")
        self.pad_id = first(hf_tokenizer.pad_token_id, self.eos_id)
        self.unk_id = hf_tokenizer.unk_token_id
        self.mask_id = hf_tokenizer.mask_token_id

    @classmethod
    def from_dir(cls, directory, case: str = "as-is") -> "HFTokenizer":
        """Load a tokenizer saved by `save` (or any `save_pretrained` tokenizer directory)."""
        from transformers import AutoTokenizer

        directory = hf_model_dir(directory)
        try:
            hf_tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        except (OSError, ValueError) as e:
            raise InputError(f"{directory}: cannot load a Hugging Face tokenizer: {e}") from None
        return cls(hf_tokenizer, case, str(directory))

    def save(self, directory) -> None:
        """Write the Hugging Face tokenizer files (`save_pretrained`); the case option is the model
        directory's (`slm_lm.model.directory.save_tokenizer`)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.hf.save_pretrained(directory)

    def digest(self) -> str:
        """16 hex digits identifying this tokenizer: the vocabulary and the case option."""
        digest = hashlib.sha1(json.dumps(sorted(self.hf.get_vocab().items())).encode())
        digest.update(self.case.encode())
        return digest.hexdigest()[:16]

    def encode(self, text: str, unknown: str = "error") -> list:
        """Ids of the pieces of `text` after `case` (no special tokens).

        Text that maps to the unknown token raises InputError naming it (`unknown="error"`), or
        stays <unk> (`unknown="unk"`).
        """
        check_unknown(unknown)
        text = apply_case(text, self.case)
        ids = self.hf(text, add_special_tokens=False)["input_ids"]
        if unknown == "error" and self.unk_id is not None and self.unk_id in ids:
            offsets = self.hf(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            bad = [text[a:b] for i, (a, b) in zip(ids, offsets) if i == self.unk_id]
            raise InputError(f"unknown text {bad!r} in {text[:80]!r}: not in the tokenizer's vocabulary")
        return ids

    def pieces(self, text: str) -> list:
        """The tokenizer's pieces of `text` (after `case`)."""
        return self.hf.convert_ids_to_tokens(self.encode(text, unknown="unk"))

    def id_to_piece(self, token_id: int) -> str:
        """The vocabulary entry of `token_id`."""
        return self.hf.convert_ids_to_tokens(int(token_id))

    def decode(self, ids) -> str:
        """Text of `ids`, special tokens skipped."""
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=True)


def is_hf_model_dir(directory) -> bool:
    """A Hugging Face model directory: config.json with a `model_type`."""
    config = Path(directory) / "config.json"
    return config.exists() and "model_type" in read_json(config)
