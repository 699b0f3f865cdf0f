"""ESPnet `AbsLM` classes wrapping the slm_lm backbones, one per kind, for `--lm <kind>`.

The causal kind (`clm`) is a left-to-right LM: it implements ESPnet's batch scorer interface
(`init_state`, `score`, `batch_score`, with a key/value cache), so ESPnet's beam search can use it for
shallow fusion. The other kinds condition every token on the words after it as well; they score whole
sentences and belong to N-best rescoring (`slm-rescore`), and every beam-search call raises
`BidirectionalLMError` saying so.
"""
from typing import Any, List, Tuple

import torch
from espnet2.lm.abs_model import AbsLM

from slm_lm.model_dir import rename_former_espnet_keys
from slm_lm.models import LanguageModel, build_lm


class BidirectionalLMError(TypeError):
    """A bidirectional slm_lm LM was asked to predict the next token (ESPnet beam search, `forward`)."""


def not_for_beam_search(kind: str) -> str:
    """Why a bidirectional kind cannot be a shallow-fusion LM, and what to do instead."""
    return (f"the slm_lm {kind!r} LM is bidirectional (each token is predicted from the words on both sides), "
            "so ESPnet's beam search cannot use it for shallow fusion: use it for N-best rescoring "
            "(slm-rescore --lm <its exp dir>); the clm kind is the slm_lm shallow-fusion LM")


class SlmLMForESPnet(AbsLM):
    """An slm_lm LM of the class's `kind` under ESPnet's `AbsLM` type; the slm_lm model is `self.model`.

    `--lm_conf` takes `size` (tiny, mini, small, base) and any `LMConfig` field as an override. Checkpoints
    from before `model` was named `backbone` (`lm.backbone.*` keys) still load.
    """

    kind = ""

    def __init__(self, vocab_size: int, size: str = "small", **overrides):
        super().__init__()
        self.model: LanguageModel = build_lm(self.kind, vocab_size, size, **overrides)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        rename_former_espnet_keys(state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class BidirectionalLMForESPnet(SlmLMForESPnet):
    """A kind that sees both sides of a token: trained and scored on whole sentences, not in beam search."""

    def _not_incremental(self):
        raise BidirectionalLMError(not_for_beam_search(self.kind))

    def forward(self, input: torch.Tensor, hidden: torch.Tensor):
        self._not_incremental()

    def init_state(self, x: torch.Tensor):
        self._not_incremental()

    def score(self, y: torch.Tensor, state: Any, x: torch.Tensor):
        self._not_incremental()

    def batch_score(self, ys: torch.Tensor, states: List[Any], xs: torch.Tensor):
        self._not_incremental()


class SlidingLMForESPnet(BidirectionalLMForESPnet):
    """Sliding LM (Transcormer)."""

    kind = "slm"


class MaskedLMForESPnet(BidirectionalLMForESPnet):
    """Masked (BERT-style) LM on the same backbone."""

    kind = "mlm"


class BiLMForESPnet(BidirectionalLMForESPnet):
    """ELMo-style bidirectional LM on the same backbone."""

    kind = "bilm"


class CausalLMForESPnet(SlmLMForESPnet):
    """Causal (GPT-style) LM on the same backbone: an incremental LM for ESPnet's beam search.

    Prefixes start with `<sos/eos>` (the last token-list index), as in ESPnet's decoders and in slm_lm's
    sentence layout, so `batch_score` gives log P(next token | prefix) exactly as `token_logprobs` scores
    a whole sentence. The state of a hypothesis is its attention keys and values,
    [n_layers, 2, heads, prefix length, head dim].
    """

    kind = "clm"

    def _states(self, ys: torch.Tensor, cache=None):
        """Hidden states [B, T - cached, d] of the positions of `ys` [B, T] not in `cache`, and the new cache.

        `cache` [n_layers, 2, B, heads, cached, head dim] holds the keys/values of the first positions.
        """
        model = self.model
        length, limit = ys.shape[1], model.config.max_positions
        if length > limit:
            raise ValueError(f"a hypothesis of {length} tokens (with <sos>) exceeds the clm's max_positions="
                             f"{limit}: decode with a smaller maxlenratio or train the LM with a larger max_positions")
        start = 0 if cache is None else cache.shape[-2]
        h = model.embed(ys)[:, start:]
        positions = torch.arange(length, device=ys.device)
        causal = positions[None, :] <= positions[start:, None]  # [new queries, all keys]
        layers_cache = []
        for depth, layer in enumerate(model.layers):
            q, k, v = layer.project(h)
            if cache is not None:
                k, v = torch.cat([cache[depth, 0], k], dim=2), torch.cat([cache[depth, 1], v], dim=2)
            h = layer.finish(h, layer.attend(q, k, v, mask=causal))
            layers_cache.append(torch.stack([k, v]))
        return h, torch.stack(layers_cache)

    def forward(self, input: torch.Tensor, hidden: None) -> Tuple[torch.Tensor, None]:
        """ESPnet's LM contract: next-token logits [B, T, V] after each prefix of `input` [B, T]; no hidden state."""
        h, _ = self._states(input)
        return self.model.head(h), None

    def init_state(self, x: torch.Tensor):
        return None

    def score(self, y: torch.Tensor, state: Any, x: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        """log P(next token | prefix `y` [T]): [V], and the state of `y`."""
        logp, states = self.batch_score(y[None], [state], x[None])
        return logp[0], states[0]

    def batch_score(self, ys: torch.Tensor, states: List[Any], xs: torch.Tensor) -> Tuple[torch.Tensor, List[Any]]:
        """log P(next token | prefix) [B, V] for the prefixes `ys` [B, T], and their states.

        A state (ESPnet keeps one per hypothesis) caches the keys/values of its prefix, so each call runs
        only the token added since; the first call (states None) runs the whole prefix.
        """
        cache = None if states[0] is None else torch.stack(states, dim=2)
        h, cache = self._states(ys, cache)
        logits = self.model.head(h[:, -1])
        logp = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
        return logp, [cache[:, :, b] for b in range(len(ys))]


class TextAutoencoderLMForESPnet(BidirectionalLMForESPnet):
    """T-TA (Transformer-based text autoencoder) on the same backbone."""

    kind = "tta"


LM_CLASSES = {cls.kind: cls for cls in (SlidingLMForESPnet, CausalLMForESPnet, MaskedLMForESPnet, BiLMForESPnet,
                                        TextAutoencoderLMForESPnet)}
BIDIRECTIONAL_KINDS = tuple(k for k, cls in LM_CLASSES.items() if issubclass(cls, BidirectionalLMForESPnet))
