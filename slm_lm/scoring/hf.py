"""Hugging Face baselines behind slm_lm's scoring interface (`slm_lm.scoring`), and a tokenizer adapter.

- `HFCausalScorer` (GPT-2 style, `AutoModelForCausalLM`): scores `bos x eos` (GPT-2: `<|endoftext|>`
  on both sides); the sum covers every piece and the end of sentence, as our own models do.
- `HFMaskedScorer` (BERT/RoBERTa, `AutoModelForMaskedLM`): pseudo-log-likelihood (Salazar et al. 2020)
  of `[CLS] x [SEP]` (RoBERTa `<s> x </s>`): one copy per piece with that piece masked; the sum
  covers the pieces only. [CLS]/[SEP] are never masked (BERT is not trained to predict them).
- `HFTokenizer`: a Hugging Face tokenizer with slm_lm's `Tokenizer` interface, for SLMs initialised
  from BERT/RoBERTa (`slm_lm.init_from_mlm`).

Models and tokenizers are read from a local directory only (`local_files_only`): nothing is
downloaded; `load_hf_scorer` loads a `hf-causal:DIR` / `hf-masked:DIR` spec (`hf_spec`). Hugging
Face models are cased; text is passed through unchanged unless `case` asks for "lower" (all lower case)
or "sentence" (lower case, first letter and the pronoun "I" upper case; the choice for upper-case ASR
N-best text with cased models).
"""
import hashlib
import json
import pickle
import re
from pathlib import Path

import torch

from slm_lm.errors import InputError
from slm_lm.fileio import read_json
from slm_lm.precision import autocast
from slm_lm.progress import progress_bar
from slm_lm.scoring import SentenceScorer, length_batches
from slm_lm.tokenizer import check_unknown

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
    """A Hugging Face tokenizer with the `slm_lm.tokenizer.Tokenizer` interface.

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
        directory's (`slm_lm.model_dir.save_tokenizer`)."""
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


class HFScorer(SentenceScorer):
    """What the Hugging Face scorers share: the model's length limit, the cache options, the forward pass.

    Text is scored as given (re-cased by the tokenizer's `case`), never normalised.
    """

    def __init__(self, model, tokenizer: HFTokenizer, device="cpu", dtype="float32", max_tokens=2048,
                 truncate=False, unknown="error"):
        super().__init__(model, tokenizer, device=device, dtype=dtype, max_tokens=max_tokens, normalize=False,
                         unknown=unknown, truncate=truncate)

    @property
    def max_length(self) -> int:
        config = self.model.config
        offset = config.pad_token_id + 1 if config.model_type in ("roberta", "xlm-roberta", "camembert") else 0
        return config.max_position_embeddings - offset

    def model_config(self) -> dict:
        """The Hugging Face config as loaded, less where it was loaded from (a copy of a model shares its
        cache)."""
        config = self.model.config.to_dict()
        config.pop("_name_or_path", None)
        return config

    def cache_options(self) -> str:
        return f"{self.unknown}{self.truncate}dtype={self.dtype}tok={self.tokenizer.digest()}"

    def _forward(self, rows: list) -> torch.Tensor:
        """Logits [B, T, V] (float32) of right-padded id lists."""
        length = max(len(r) for r in rows)
        ids = torch.full((len(rows), length), self.tokenizer.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), length), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            attention[i, : len(r)] = 1
        with autocast(self.device, self.dtype):
            logits = self.model(input_ids=ids.to(self.device), attention_mask=attention.to(self.device)).logits
        return logits.float()


class HFCausalScorer(HFScorer):
    """GPT-2 style scorer: log P(x_i | x_<i) for every piece and the end of sentence."""

    kind = "hf-causal"

    def _logprobs(self, encoded: list, progress: bool) -> list:
        """Per sentence, a float tensor of the log-probs of its pieces followed by the end of sentence."""
        results = [None] * len(encoded)
        with progress_bar(total=len(encoded), desc="scoring", unit="sent", disable=not progress) as bar:
            for chunk in length_batches([len(e) for e in encoded], self.max_tokens):
                logits = self._forward([encoded[i] for i in chunk])
                logprobs = torch.log_softmax(logits[:, :-1], dim=-1).cpu()
                for row, i in enumerate(chunk):
                    targets = torch.tensor(encoded[i][1:])
                    results[i] = logprobs[row, : len(targets)].gather(-1, targets[:, None])[:, 0]
                bar.update(len(chunk))
        return results


class HFMaskedScorer(HFScorer):
    """BERT/RoBERTa pseudo-log-likelihood: each piece scored with only that piece masked.

    The masked copies of all sentences are batched together under the `max_tokens` budget.
    """

    kind = "hf-masked"

    def __init__(self, model, tokenizer: HFTokenizer, **options):
        if tokenizer.mask_id is None:
            raise InputError("the tokenizer has no mask token: not a masked LM")
        super().__init__(model, tokenizer, **options)

    def _logprobs(self, encoded: list, progress: bool) -> list:
        """Per sentence, a float tensor of the PLL terms of its pieces (no [CLS]/[SEP])."""
        items = [(i, p) for i, ids in enumerate(encoded) for p in range(1, len(ids) - 1)]
        results = [torch.zeros(len(ids) - 2) for ids in encoded]
        with progress_bar(total=len(items), desc="scoring (PLL)", unit="token", disable=not progress) as bar:
            for chunk in length_batches([len(encoded[i]) for i, _ in items], self.max_tokens):
                copies = []
                for j in chunk:
                    i, p = items[j]
                    copy = list(encoded[i])
                    copy[p] = self.tokenizer.mask_id
                    copies.append(copy)
                logits = self._forward(copies)
                positions = torch.tensor([items[j][1] for j in chunk], device=logits.device)
                picked = torch.log_softmax(logits[torch.arange(len(chunk)), positions], dim=-1).cpu()
                for row, j in enumerate(chunk):
                    i, p = items[j]
                    results[i][p - 1] = picked[row, encoded[i][p]]
                bar.update(len(chunk))
        return results


SCORERS = {"hf-causal": HFCausalScorer, "hf-masked": HFMaskedScorer}
HF_KINDS = tuple(SCORERS)


def is_hf_model_dir(directory) -> bool:
    """A Hugging Face model directory: config.json with a `model_type`."""
    config = Path(directory) / "config.json"
    return config.exists() and "model_type" in read_json(config)


def hf_spec(spec: str):
    """(kind, directory) of a `hf-causal:DIR` / `hf-masked:DIR` spec, else None."""
    kind, sep, path = str(spec).partition(":")
    return (kind, path) if sep and kind in HF_KINDS else None


def load_hf_scorer(kind: str, path, case: str = "as-is", **options):
    """A scorer for the Hugging Face model saved in directory `path` (no download).

    kind: "hf-causal" (AutoModelForCausalLM) or "hf-masked" (AutoModelForMaskedLM, PLL).
    options: device, dtype, max_tokens, truncate, unknown (as for `slm_lm.scorer.Scorer`); `normalize=False`
    is accepted (these scorers score the text as given, re-cased by `case`).
    """
    if options.pop("normalize", False):
        raise InputError(f"{kind}:{path}: Hugging Face scorers do not normalise text (use case=... instead)")
    if options.pop("whole_words", False):
        raise InputError(f"{kind}:{path}: whole-word scoring needs an slm_lm model with its sentencepiece tokenizer")
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    if kind not in SCORERS:
        raise InputError(f"unknown Hugging Face scorer kind {kind!r}; expected one of {HF_KINDS}")
    directory = hf_model_dir(path)
    tokenizer = HFTokenizer.from_dir(directory, case=check_case(case))
    auto = AutoModelForCausalLM if kind == "hf-causal" else AutoModelForMaskedLM
    try:
        model = auto.from_pretrained(directory, local_files_only=True)
    except pickle.UnpicklingError as e:  # a .bin of torch.save whose pickle torch's weights_only refuses
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        weights = next(Path(directory).glob("pytorch_model*.bin"), Path(directory))
        raise InputError(f"{weights}: refused to unpickle objects other than tensors"
                         f"{f' ({found.group(1)})' if found else ''} (torch.load weights_only); re-save the model "
                         "with save_pretrained (safetensors)") from None
    except (OSError, ValueError, RuntimeError, EOFError, SafetensorError) as e:
        reason = " ".join(str(e).split())[:300]
        raise InputError(f"{directory}: cannot load a {kind} model (missing, truncated or garbled file?): "
                         f"{reason}") from None
    return SCORERS[kind](model, tokenizer, **options)
