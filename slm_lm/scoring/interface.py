"""The scoring interface that every sentence scorer implements (ours in `slm_lm.scoring.scorer`, the Hugging Face
baselines in `slm_lm.scoring.hf`): encoding, log-probs batched by a token budget, sums and per-token scores, and
the name that keys the score cache (`slm_lm.scoring.cache`).
"""
import hashlib
import json

import torch

from slm_lm.common.errors import InputError
from slm_lm.data.text_norm import normalize_librispeech
from slm_lm.model.precision import resolve_dtype
from slm_lm.model.tokenizer import check_unknown


def length_batches(lengths: list, max_tokens: int):
    """Index lists, longest first, each with at most `max_tokens` padded tokens (or one item)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch = []
    for i in order:
        if batch and (len(batch) + 1) * lengths[batch[0]] > max_tokens:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def canonical_json(value) -> str:
    """`value` as JSON with sorted keys and no whitespace (values JSON cannot hold, such as a dtype, as str)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def fingerprint(model: torch.nn.Module, options: str, config: dict | None = None) -> str:
    """16 hex digits identifying everything a model's scores depend on: its whole `config` as loaded (every
    field, canonical JSON), its weights (every tensor of the state dict) and the scoring `options` (which
    hold the tokenizer's digest)."""
    digest = hashlib.sha1()
    digest.update(canonical_json(config or {}).encode())
    digest.update(b"\0")
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(canonical_json([str(tensor.dtype), list(tensor.shape)]).encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    digest.update(b"\0")
    digest.update(options.encode())
    return digest.hexdigest()[:16]


class SentenceScorer:
    """Scores sentences with a model and its tokenizer; subclasses give `kind`, `max_length`, `cache_options`,
    `model_config` and `_logprobs`.

    Every sentence is encoded as `[bos, pieces..., eos]` (after LibriSpeech normalisation when `normalize`).
    Text the tokenizer does not know raises `InputError` naming the sentence (`unknown="error"`) or maps to
    <unk> (`unknown="unk"`); a sentence longer than `max_length` raises `InputError` unless `truncate`, which
    keeps its first pieces. `dtype` is the autocast dtype (`slm_lm.model.precision.resolve_dtype`); batches hold at
    most `max_tokens` padded tokens.
    """

    kind = ""

    def __init__(self, model, tokenizer, device="cpu", dtype="float32", max_tokens=8192, normalize=False,
                 unknown="error", truncate=False):
        self.dtype = resolve_dtype(dtype, device)
        self.unknown = check_unknown(unknown)
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.max_tokens, self.normalize, self.truncate = max_tokens, normalize, truncate
        self._name = None

    @property
    def max_length(self) -> int:
        """The most tokens (with bos and eos) the model takes in one sentence."""
        raise NotImplementedError

    def cache_options(self) -> str:
        """The scoring options that change a score, the tokenizer's digest among them, as a string (part of
        `name`)."""
        raise NotImplementedError

    def model_config(self) -> dict:
        """The model's whole configuration as loaded (part of `name`): every field, whether or not it is
        thought to change a score."""
        raise NotImplementedError

    @property
    def name(self) -> str:
        """Identifies everything that changes a score (kind, the whole model config, weights, tokenizer,
        options): the cache key."""
        if self._name is None:
            self._name = f"{self.kind}-{fingerprint(self.model, self.cache_options(), self.model_config())}"
        return self._name

    def encode(self, sentences: list) -> list:
        """Token ids `[bos, pieces..., eos]` for each sentence; errors name the sentence index."""
        limit = self.max_length - 2
        encoded = []
        for index, sentence in enumerate(sentences):
            if not isinstance(sentence, str):
                raise InputError(f"sentence {index}: expected a string, got {type(sentence).__name__}", index)
            text = normalize_librispeech(sentence) if self.normalize else sentence
            try:
                ids = self.tokenizer.encode(text, unknown=self.unknown)
            except InputError as e:
                raise InputError(f"sentence {index}: {e}", index) from None
            if len(ids) > limit:
                if not self.truncate:
                    raise InputError(
                        f"sentence {index}: {len(ids)} tokens exceed the model's limit of {limit} "
                        "(pass truncate=True / --truncate to score only the first tokens)",
                        index,
                    )
                ids = ids[:limit]
            encoded.append([self.tokenizer.bos_id, *ids, self.tokenizer.eos_id])
        return encoded

    def _logprobs(self, encoded: list, progress: bool) -> list:
        """Per encoded sentence, a float tensor of the log-probs of its scored tokens."""
        raise NotImplementedError

    @torch.inference_mode()
    def logprobs(self, sentences: list, progress: bool = False) -> list:
        """Per sentence, a float tensor of the log-probs of its scored tokens (its pieces, and the end of
        sentence where the model predicts it)."""
        return self._logprobs(self.encode(list(sentences)), progress)

    def score(self, sentences: list, progress: bool = False) -> list:
        """Sum of the scored token log-probs (natural log) per sentence, in input order."""
        return [float(row.double().sum()) for row in self.logprobs(sentences, progress)]

    @torch.inference_mode()
    def token_scores(self, sentences: list, progress: bool = False) -> list:
        """Per sentence, [(piece, log-prob), ...] for the scored tokens, ending with ("</s>", log-prob) where
        the end of sentence is scored."""
        encoded = self.encode(list(sentences))
        out = []
        for ids, row in zip(encoded, self._logprobs(encoded, progress)):
            pieces = [self.tokenizer.id_to_piece(t) for t in ids[1:-1]]
            if len(row) == len(pieces) + 1:
                pieces.append("</s>")
            out.append([(p, float(lp)) for p, lp in zip(pieces, row)])
        return out
