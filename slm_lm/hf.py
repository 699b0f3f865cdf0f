"""Hugging Face baselines behind slm_lm's Scorer interface, and a tokenizer adapter.

- `HFCausalScorer` (GPT-2 style, `AutoModelForCausalLM`): scores `bos x eos` (GPT-2: `<|endoftext|>`
  on both sides); the sum covers every piece and the end of sentence, as our own models do.
- `HFMaskedScorer` (BERT/RoBERTa, `AutoModelForMaskedLM`): pseudo-log-likelihood (Salazar et al. 2020)
  of `[CLS] x [SEP]` (RoBERTa `<s> x </s>`): one copy per piece with that piece masked; the sum
  covers the pieces only. [CLS]/[SEP] are never masked (BERT is not trained to predict them).
- `HFTokenizer`: a Hugging Face tokenizer with slm_lm's `Tokenizer` interface, for SLMs initialised
  from BERT/RoBERTa (`slm_lm.init_from_mlm`).

Models and tokenizers are read from a local directory only (`local_files_only`): nothing is
downloaded. Hugging Face models are cased; text is passed through unchanged unless `case` asks for
"lower" (all lower case) or "sentence" (lower case, first letter and the pronoun "I" upper case; the
choice for upper-case ASR N-best text with cased models).
"""
import json
import re
from pathlib import Path

import torch
from tqdm import tqdm

from slm_lm.errors import InputError
from slm_lm.model_files import read_json
from slm_lm.precision import autocast, resolve_dtype
from slm_lm.scorer import fingerprint, length_batches, tokenizer_digest

CASES = ("as-is", "lower", "sentence")
CASE_FILE = "slm_hf_tokenizer.json"
_PRONOUN_I = re.compile(r"(?<![\w'])i(?=$|[^\w']|'(?:m|d|ll|ve)\b)")


def apply_case(text: str, case: str) -> str:
    """`text` as-is, lower-cased, or sentence-cased (lower, then first letter and "I" upper)."""
    if _check_case(case) == "as-is":
        return text
    text = text.lower()
    if case == "lower":
        return text
    text = _PRONOUN_I.sub("I", text)
    for i, char in enumerate(text):
        if char.isalpha():
            return text[:i] + char.upper() + text[i + 1 :]
    return text


def _check_case(case: str) -> str:
    if case not in CASES:
        raise ValueError(f"case must be one of {CASES}, got {case!r}")
    return case


def _model_dir(path) -> Path:
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
        self.case = _check_case(case)
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
    def from_dir(cls, directory, case=None) -> "HFTokenizer":
        """Load a tokenizer saved by `save` (or any `save_pretrained` tokenizer directory)."""
        from transformers import AutoTokenizer

        directory = _model_dir(directory)
        saved = directory / CASE_FILE
        if case is None:
            case = read_json(saved).get("case", "as-is") if saved.exists() else "as-is"
        try:
            hf_tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        except (OSError, ValueError) as e:
            raise InputError(f"{directory}: cannot load a Hugging Face tokenizer: {e}") from None
        return cls(hf_tokenizer, case, str(directory))

    def save(self, directory) -> None:
        """Write the Hugging Face tokenizer files (`save_pretrained`) and the case option."""
        from slm_lm.fileio import write_atomic

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.hf.save_pretrained(directory)
        write_atomic(directory / CASE_FILE, json.dumps({"case": self.case}))

    def encode(self, text: str, unknown: str = "error") -> list:
        """Ids of the pieces of `text` after `case` (no special tokens).

        Text that maps to the unknown token raises InputError naming it (`unknown="error"`), or
        stays <unk> (`unknown="unk"`).
        """
        if unknown not in ("error", "unk"):
            raise ValueError(f"unknown must be 'error' or 'unk', not {unknown!r}")
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


class HFScorer:
    """Shared parts of the Hugging Face scorers: encoding, token-budget batching, the Scorer API."""

    kind = ""

    def __init__(self, model, tokenizer: HFTokenizer, device="cpu", dtype="float32", max_tokens=2048,
                 truncate=False, unknown="error"):
        dtype = resolve_dtype(dtype, device)
        if unknown not in ("error", "unk"):
            raise ValueError(f"unknown must be 'error' or 'unk', got {unknown!r}")
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device, self.dtype = torch.device(device), dtype
        self.max_tokens, self.truncate, self.unknown = max_tokens, truncate, unknown
        config = model.config
        offset = config.pad_token_id + 1 if config.model_type in ("roberta", "xlm-roberta", "camembert") else 0
        self.max_length = config.max_position_embeddings - offset
        self._name = None

    @property
    def name(self) -> str:
        """Identifies the weights and scoring options (cache key)."""
        if self._name is None:
            options = f"{self.unknown}{self.truncate}dtype={self.dtype}tok={tokenizer_digest(self.tokenizer)}"
            self._name = f"{self.kind}-{fingerprint(self.model, options)}"
        return self._name

    def encode(self, sentences: list) -> list:
        """`[bos, pieces..., eos]` per sentence; errors name the sentence index."""
        limit = self.max_length - 2
        encoded = []
        for index, sentence in enumerate(sentences):
            if not isinstance(sentence, str):
                raise InputError(f"sentence {index}: expected a string, got {type(sentence).__name__}", index)
            try:
                ids = self.tokenizer.encode(sentence, unknown=self.unknown)
            except InputError as e:
                raise InputError(f"sentence {index}: {e}", index) from None
            if len(ids) > limit:
                if not self.truncate:
                    raise InputError(f"sentence {index}: {len(ids)} tokens exceed the model's limit of {limit} "
                                     "(pass truncate=True to score only the first tokens)", index)
                ids = ids[:limit]
            encoded.append([self.tokenizer.bos_id, *ids, self.tokenizer.eos_id])
        return encoded

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

    @torch.inference_mode()
    def logprobs(self, sentences: list, progress: bool = False) -> list:
        """Per sentence, a float tensor of the log-probs of its scored tokens."""
        return self._logprobs(self.encode(list(sentences)), progress)

    def _logprobs(self, encoded: list, progress: bool) -> list:
        raise NotImplementedError

    def score(self, sentences: list, progress: bool = False) -> list:
        """Sum of the scored token log-probs per sentence, in input order."""
        return [float(row.double().sum()) for row in self.logprobs(sentences, progress)]

    @torch.inference_mode()
    def token_scores(self, sentences: list, progress: bool = False) -> list:
        """Per sentence, [(piece, log-prob), ...] for the scored tokens."""
        encoded = self.encode(list(sentences))
        out = []
        for ids, row in zip(encoded, self._logprobs(encoded, progress)):
            pieces = [self.tokenizer.id_to_piece(t) for t in ids[1:-1]]
            if len(row) == len(pieces) + 1:
                pieces.append("</s>")
            out.append([(p, float(lp)) for p, lp in zip(pieces, row)])
        return out


class HFCausalScorer(HFScorer):
    """GPT-2 style scorer: log P(x_i | x_<i) for every piece and the end of sentence."""

    kind = "hf-causal"

    def _logprobs(self, encoded: list, progress: bool) -> list:
        """Per sentence, a float tensor of the log-probs of its pieces followed by the end of sentence."""
        results = [None] * len(encoded)
        with tqdm(total=len(encoded), desc="scoring", unit="sent", disable=not progress) as bar:
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
        with tqdm(total=len(items), desc="scoring (PLL)", unit="token", disable=not progress) as bar:
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
        raise InputError(f"unknown Hugging Face scorer kind {kind!r}; expected one of {tuple(SCORERS)}")
    directory = _model_dir(path)
    tokenizer = HFTokenizer.from_dir(directory, case=_check_case(case))
    auto = AutoModelForCausalLM if kind == "hf-causal" else AutoModelForMaskedLM
    try:
        model = auto.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, RuntimeError, EOFError, SafetensorError) as e:
        reason = " ".join(str(e).split())[:300]
        raise InputError(f"{directory}: cannot load a {kind} model (missing, truncated or garbled file?): {reason}") from None
    return SCORERS[kind](model, tokenizer, **options)
