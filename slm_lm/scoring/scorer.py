"""Our sentence scorer: an slm_lm LM and its tokenizer behind the scoring interface (`slm_lm.scoring.interface`)."""
import torch

from slm_lm.common.progress import progress_bar
from slm_lm.model import directory as model_dir
from slm_lm.model.kinds import LanguageModel, MaskedLM
from slm_lm.model.precision import autocast
from slm_lm.model.tokenizer import Tokenizer
from slm_lm.scoring.hf import hf_spec, load_hf_scorer
from slm_lm.scoring.interface import SentenceScorer, length_batches


class Scorer(SentenceScorer):
    """Scores sentences with an LM: `score` gives the sum of token log-probs (natural log) per sentence.

    Every sentence is scored as `<s> pieces </s>`: the sum covers every piece and the end of sentence,
    so the empty string is valid (log P(</s> | <s>)). Sentences are normalised LibriSpeech-style (upper
    case, words and apostrophes) unless `normalize=False`. Characters the tokenizer does not know raise
    `InputError` naming the sentence (or map to <unk> with `unknown="unk"`); a sentence longer than the
    model's positions raises `InputError` unless `truncate=True`, which scores its first pieces only.
    `dtype` is the autocast dtype: float32, bfloat16, float16, or auto (`slm_lm.model.precision.resolve_dtype`).
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
        if model.config.vocab_size != tokenizer.vocab_size:
            raise ValueError(
                f"model vocabulary ({model.config.vocab_size}) differs from the tokenizer's ({tokenizer.vocab_size})"
            )
        super().__init__(model, tokenizer, device=device, dtype=dtype, max_tokens=max_tokens, normalize=normalize,
                         unknown=unknown, truncate=truncate)
        self.word_start_table = None
        if whole_words:
            if not hasattr(tokenizer, "word_start_ids"):
                raise ValueError(f"whole_words needs a sentencepiece tokenizer, not {type(tokenizer).__name__}")
            self.word_start_table = torch.tensor(tokenizer.word_start_ids())

    @property
    def kind(self) -> str:
        return self.model.config.kind

    @property
    def max_length(self) -> int:
        return self.model.config.max_positions

    def model_config(self) -> dict:
        return self.model.config.to_dict()

    def cache_options(self) -> str:
        options = f"{self.normalize}{self.unknown}{self.truncate}dtype={self.dtype}"
        if self.word_start_table is not None:
            options += "whole_words"
        options += f"tok={self.tokenizer.digest()}"
        if isinstance(self.model, MaskedLM):
            options += f"k={self.model.k},seed={self.model.seed}"
        return options

    def _logprobs(self, encoded: list, progress: bool) -> list:
        """Per sentence, a float tensor of the log-probs of its pieces followed by </s>."""
        results = [None] * len(encoded)
        with progress_bar(total=len(encoded), desc="scoring", unit="sent", disable=not progress) as bar:
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

    def save_pretrained(self, directory) -> None:
        """Write config.json, model.pt (fp32) and the tokenizer files to `directory` (atomic per file)."""
        options = {"normalize": self.normalize}
        if isinstance(self.model, MaskedLM):
            options.update(mlm_k=self.model.k, mlm_seed=self.model.seed)
        model_dir.save_pretrained(directory, self.model, self.tokenizer, options)

    @classmethod
    def from_pretrained(cls, directory, mlm_k=None, **options) -> "Scorer":
        """Load a directory written by `save_pretrained`, an ESPnet LM experiment directory, or a shipped
        model by name (`slm_lm.pretrained.names()`).

        `mlm_k` (masked LMs only) overrides the saved tokens-per-pass of pseudo-log-likelihood scoring.
        """
        model, tokenizer, saved = model_dir.load_model(directory)
        if isinstance(model, MaskedLM):
            model.k = mlm_k if mlm_k is not None else saved.get("mlm_k", 1)
            model.seed = saved.get("mlm_seed", 0)
        elif mlm_k is not None:
            raise ValueError(f"mlm_k applies to masked LMs only; {directory} holds a {model.config.kind!r} model")
        for option in ("normalize", "whole_words"):
            if option in saved:
                options.setdefault(option, saved[option])
        return cls(model, tokenizer, **options)


def load_scorer(spec: str, **options) -> SentenceScorer:
    """A scorer from a spec: a shipped model name, a model directory (save_pretrained or ESPnet LM
    experiment), or `hf-causal:DIR` / `hf-masked:DIR` for a Hugging Face model saved on disk."""
    hf = hf_spec(spec)
    if hf is not None:
        return load_hf_scorer(*hf, **options)
    return Scorer.from_pretrained(spec, **options)
