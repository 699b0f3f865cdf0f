"""Sentence scoring: tokenizer + LM, batched by a token budget, order preserved."""
import hashlib
import json
from pathlib import Path

import torch
from tqdm import tqdm

from slm_lm import pretrained
from slm_lm.config import LMConfig
from slm_lm.errors import InputError
from slm_lm.fileio import atomic_open, write_atomic
from slm_lm.model_files import KIND_KEY, load_safetensors, load_torch, read_json
from slm_lm.models import LanguageModel, MaskedLM, model_from_config
from slm_lm.precision import autocast, resolve_dtype
from slm_lm.text_norm import normalize_librispeech
from slm_lm.tokenizer import Tokenizer

CONFIG_FILE, WEIGHTS_FILE, SAFETENSORS_FILE = "config.json", "model.pt", "model.safetensors"


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


class Scorer:
    """Scores sentences with an LM: `score` gives the sum of token log-probs (natural log) per sentence.

    Every sentence is scored as `<s> pieces </s>`: the sum covers every piece and the end of sentence,
    so the empty string is valid (log P(</s> | <s>)). Sentences are normalised LibriSpeech-style (upper
    case, words and apostrophes) unless `normalize=False`. Characters the tokenizer does not know raise
    `InputError` naming the sentence (or map to <unk> with `unknown="unk"`); a sentence longer than the
    model's positions raises `InputError` unless `truncate=True`, which scores its first pieces only.
    `dtype` is the autocast dtype: float32, bfloat16, float16, or auto (`slm_lm.precision.resolve_dtype`).
    `whole_words=True` hides the rest of a piece's own word from its right context (PLL-word-l2r, Kauf &
    Ivanova, 2023): each word is scored left to right given the whole words around it, so a word split
    into many pieces is no longer easy to predict from its own pieces. It changes nothing for a CLM.
    """

    def __init__(
        self,
        model: LanguageModel,
        tokenizer: Tokenizer,
        device: str = "cpu",
        dtype: str = "float32",
        max_tokens: int = 8192,
        normalize: bool = True,
        unknown: str = "error",
        truncate: bool = False,
        whole_words: bool = False,
    ):
        dtype = resolve_dtype(dtype, device)
        if unknown not in ("error", "unk"):
            raise ValueError(f"unknown must be 'error' or 'unk', got {unknown!r}")
        if model.config.vocab_size != tokenizer.vocab_size:
            raise ValueError(
                f"model vocabulary ({model.config.vocab_size}) differs from the tokenizer's ({tokenizer.vocab_size})"
            )
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device, self.dtype = torch.device(device), dtype
        self.max_tokens, self.normalize, self.unknown, self.truncate = max_tokens, normalize, unknown, truncate
        self.word_start_table = None
        if whole_words:
            if not hasattr(tokenizer, "word_start_ids"):
                raise ValueError(f"whole_words needs a sentencepiece tokenizer, not {type(tokenizer).__name__}")
            self.word_start_table = torch.tensor(tokenizer.word_start_ids())
        self._name = None

    @property
    def name(self) -> str:
        """Identifies everything that changes a score (weights, tokenizer, dtype, options): the cache key."""
        if self._name is None:
            options = f"{self.normalize}{self.unknown}{self.truncate}dtype={self.dtype}"
            if self.word_start_table is not None:
                options += "whole_words"
            options += f"tok={tokenizer_digest(self.tokenizer)}"
            if isinstance(self.model, MaskedLM):
                options += f"k={self.model.k},seed={self.model.seed}"
            self._name = f"{self.model.config.kind}-{fingerprint(self.model, options)}"
        return self._name

    def encode(self, sentences: list) -> list:
        """Token ids `<s> pieces </s>` for each sentence; errors name the sentence index."""
        limit = self.model.config.max_positions - 2
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

    @torch.inference_mode()
    def logprobs(self, sentences: list, progress: bool = False) -> list:
        """Per sentence, a float tensor of log-probs of its pieces followed by </s>."""
        return self._logprobs(self.encode(list(sentences)), progress)

    def _logprobs(self, encoded: list, progress: bool) -> list:
        results = [None] * len(encoded)
        with tqdm(total=len(encoded), desc="scoring", unit="sent", disable=not progress) as bar:
            for batch in length_batches([len(e) for e in encoded], self.max_tokens):
                lengths = torch.tensor([len(encoded[i]) for i in batch])
                tokens = torch.full((len(batch), int(lengths.max())), self.tokenizer.pad_id, dtype=torch.long)
                for row, i in enumerate(batch):
                    tokens[row, : len(encoded[i])] = torch.tensor(encoded[i])
                words = None if self.word_start_table is None else self.word_start_table[tokens].to(self.device)
                with autocast(self.device, self.dtype):
                    scores = self.model.token_logprobs(tokens.to(self.device), lengths.to(self.device), words).cpu()
                for row, i in enumerate(batch):
                    results[i] = scores[row, 1 : lengths[row]]
                bar.update(len(batch))
        return results

    def score(self, sentences: list, progress: bool = False) -> list:
        """Sum of token log-probs (pieces + end of sentence) per sentence, in input order."""
        return [float(row.double().sum()) for row in self.logprobs(sentences, progress)]

    @torch.inference_mode()
    def token_scores(self, sentences: list, progress: bool = False) -> list:
        """Per sentence, [(piece, log-prob), ...] ending with ("</s>", log-prob)."""
        encoded = self.encode(list(sentences))
        return [
            [(self.tokenizer.id_to_piece(t), float(lp)) for t, lp in zip(ids[1:-1], row)] + [("</s>", float(row[-1]))]
            for ids, row in zip(encoded, self._logprobs(encoded, progress))
        ]

    def save_pretrained(self, directory) -> None:
        """Write config.json, model.pt and the tokenizer files to `directory` (atomic per file)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        config = {"model": self.model.config.to_dict(), "scorer": {"normalize": self.normalize}}
        if isinstance(self.model, MaskedLM):
            config["scorer"].update(mlm_k=self.model.k, mlm_seed=self.model.seed)
        if getattr(self.tokenizer, "kind", None) == "hf":
            config["tokenizer"] = "hf"
        with atomic_open(directory / WEIGHTS_FILE, "wb") as f:
            torch.save({**self.model.state_dict(), KIND_KEY: self.model.config.kind}, f)
        self.tokenizer.save(directory)
        write_atomic(directory / CONFIG_FILE, json.dumps(config, indent=2))

    @classmethod
    def from_pretrained(cls, directory, mlm_k=None, **options) -> "Scorer":
        """Load a directory written by `save_pretrained`, an ESPnet LM experiment directory, or a shipped
        model by name (`slm_lm.pretrained.names()`).

        `mlm_k` (masked LMs only) overrides the saved tokens-per-pass of pseudo-log-likelihood scoring.
        """
        directory = Path(directory)
        if not directory.exists() and pretrained.path(str(directory)) is not None:
            directory = pretrained.path(str(directory))
        if not directory.is_dir():
            known = ", ".join(pretrained.names()) or "none"
            raise InputError(f"{directory}: model directory not found (shipped models: {known})")
        if (directory / "config.yaml").exists() and not (directory / CONFIG_FILE).exists():
            from slm_lm.espnet_lm.export import load_espnet_experiment

            model, tokenizer = load_espnet_experiment(directory)
            saved = {}
        else:
            model, tokenizer, saved = cls._load_saved(directory)
        if isinstance(model, MaskedLM):
            model.k = mlm_k if mlm_k is not None else saved.get("mlm_k", 1)
            model.seed = saved.get("mlm_seed", 0)
        elif mlm_k is not None:
            raise ValueError(f"mlm_k applies to masked LMs only; {directory} holds a {model.config.kind!r} model")
        for option in ("normalize", "whole_words"):
            if option in saved:
                options.setdefault(option, saved[option])
        return cls(model, tokenizer, **options)

    @staticmethod
    def _load_saved(directory: Path):
        """(model, tokenizer, saved scorer options) of a save_pretrained directory.

        Every problem (missing, empty, truncated or garbled file, unknown config key, weights of another
        shape or kind than config.json declares, tokenizer of another vocabulary) raises InputError.
        """
        weights = directory / SAFETENSORS_FILE
        if not weights.exists():
            weights = directory / WEIGHTS_FILE
        config_path = directory / CONFIG_FILE
        for path in (config_path, weights):
            if not path.exists():
                raise InputError(f"{directory}: missing {path.name} (not a save_pretrained directory)")
        config = read_json(config_path)
        if not isinstance(config.get("model"), dict):
            raise InputError(f"{config_path}: no 'model' section (not a save_pretrained config)")
        try:
            model = model_from_config(LMConfig.from_dict(config["model"]))
        except (TypeError, ValueError) as e:
            raise InputError(f"{config_path}: bad model config: {e}") from None
        if weights.name == SAFETENSORS_FILE:
            state, metadata = load_safetensors(weights)
            state = {k: v.float() for k, v in state.items()}
            # Shipped weights store the tied head projection once, as the token embedding.
            if "embed.tokens.weight" in state:
                state.setdefault("head.embedding.weight", state["embed.tokens.weight"])
            saved_kind = metadata.get(KIND_KEY)
        else:
            state = load_torch(weights)
            saved_kind = state.pop(KIND_KEY, None)
        kind = model.config.kind
        if saved_kind is not None and saved_kind != kind:
            raise InputError(f"{config_path}: declares kind {kind!r} but {weights.name} holds a {saved_kind!r} model")
        try:
            model.load_state_dict(state)
        except RuntimeError as e:
            reason = " ".join(str(e).split())[:300]
            raise InputError(f"{weights}: weights do not match {config_path.name} (kind {kind!r}, vocab_size "
                             f"{model.config.vocab_size}): {reason}") from None
        if config.get("tokenizer") == "hf":
            from slm_lm.hf import HFTokenizer

            tokenizer = HFTokenizer.from_dir(directory)
        else:
            tokenizer = Tokenizer.from_dir(directory)
        if tokenizer.vocab_size != model.config.vocab_size:
            raise InputError(f"{directory}: the tokenizer has {tokenizer.vocab_size} tokens but {CONFIG_FILE} "
                             f"declares vocab_size {model.config.vocab_size}; the files do not belong together")
        return model, tokenizer, config.get("scorer", {})


def fingerprint(model: torch.nn.Module, options: str) -> str:
    """16 hex digits identifying a model's weights and the scoring options."""
    digest = hashlib.sha1()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    digest.update(options.encode())
    return digest.hexdigest()[:16]


def tokenizer_digest(tokenizer) -> str:
    """16 hex digits identifying a tokenizer (sentencepiece model + token list, or a Hugging Face vocabulary)."""
    digest = hashlib.sha1()
    if hasattr(tokenizer, "hf"):
        digest.update(json.dumps(sorted(tokenizer.hf.get_vocab().items())).encode())
        digest.update(tokenizer.case.encode())
    else:
        digest.update(tokenizer._model_bytes)
        digest.update("\n".join(tokenizer.token_list).encode())
    return digest.hexdigest()[:16]


HF_KINDS = ("hf-causal", "hf-masked")


def load_scorer(spec: str, **options):
    """A scorer from a spec: a model directory (save_pretrained or ESPnet LM experiment), or
    `hf-causal:DIR` / `hf-masked:DIR` for a Hugging Face model saved on disk."""
    kind, sep, path = spec.partition(":")
    if sep and kind in HF_KINDS:
        from slm_lm.hf import load_hf_scorer

        return load_hf_scorer(kind, path, **options)
    return Scorer.from_pretrained(spec, **options)

