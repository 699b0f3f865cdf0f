"""The causal slm_lm kind (`clm`) as an ESPnet LM: a left-to-right LM with ESPnet's batch scorer interface
(`init_state`, `score`, `batch_score`, with a key/value cache), so ESPnet's beam search can use it for shallow
fusion.
"""
from typing import Any, List, Tuple

import torch

from slm_lm.espnet_lm.base_lm import SlmLMForESPnet


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
        positions = torch.arange(length, device=ys.device)
        h = model.embed(ys, positions.expand_as(ys))[:, start:]
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
