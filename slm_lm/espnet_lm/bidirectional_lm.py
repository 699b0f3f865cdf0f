"""The bidirectional slm_lm kinds as ESPnet LMs (`slm`, `mlm`, `bilm`, `tta`): each token is conditioned on the
words after it as well, so they score whole sentences and belong to N-best rescoring (`slm-rescore`); every
beam-search call raises `BidirectionalLMError` saying so.
"""
from typing import Any, List

import torch

from slm_lm.espnet_lm.base_lm import SlmLMForESPnet


class BidirectionalLMError(TypeError):
    """A bidirectional slm_lm LM was asked to predict the next token (ESPnet beam search, `forward`)."""


def not_for_beam_search(kind: str) -> str:
    """Why a bidirectional kind cannot be a shallow-fusion LM, and what to do instead."""
    return (f"the slm_lm {kind!r} LM is bidirectional (each token is predicted from the words on both sides), "
            "so ESPnet's beam search cannot use it for shallow fusion: use it for N-best rescoring "
            "(slm-rescore --lm <its exp dir>); the clm kind is the slm_lm shallow-fusion LM")


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


class TextAutoencoderLMForESPnet(BidirectionalLMForESPnet):
    """T-TA (Transformer-based text autoencoder) on the same backbone."""

    kind = "tta"
