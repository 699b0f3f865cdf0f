"""Hugging Face baselines behind slm_lm's scoring interface (`slm_lm.scoring.interface`).

- `HFCausalScorer` (GPT-2 style, `AutoModelForCausalLM`): scores `bos x eos` (GPT-2: `<|endoftext|>`
  on both sides); the sum covers every piece and the end of sentence, as our own models do.
- `HFMaskedScorer` (BERT/RoBERTa, `AutoModelForMaskedLM`): pseudo-log-likelihood (Salazar et al. 2020)
  of `[CLS] x [SEP]` (RoBERTa `<s> x </s>`): one copy per piece with that piece masked; the sum
  covers the pieces only. [CLS]/[SEP] are never masked (BERT is not trained to predict them).

Models are read from a local directory only (`local_files_only`): nothing is downloaded; `load_hf_scorer` loads
a `hf-causal:DIR` / `hf-masked:DIR` spec (`hf_spec`). Text is re-cased by the tokenizer
(`slm_lm.model.hf_tokenizer`: the `case` option).
"""
import pickle
import re
from pathlib import Path

import torch

from slm_lm.common.errors import InputError
from slm_lm.common.progress import progress_bar
from slm_lm.model.hf_tokenizer import HFTokenizer, check_case, hf_model_dir
from slm_lm.model.precision import autocast
from slm_lm.scoring.interface import SentenceScorer, length_batches


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


def hf_spec(spec: str):
    """(kind, directory) of a `hf-causal:DIR` / `hf-masked:DIR` spec, else None."""
    kind, sep, path = str(spec).partition(":")
    return (kind, path) if sep and kind in HF_KINDS else None


def load_hf_scorer(kind: str, path, case: str = "as-is", **options):
    """A scorer for the Hugging Face model saved in directory `path` (no download).

    kind: "hf-causal" (AutoModelForCausalLM) or "hf-masked" (AutoModelForMaskedLM, PLL).
    options: device, dtype, max_tokens, truncate, unknown (as for `slm_lm.scoring.scorer.Scorer`); `normalize=False`
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
