"""The ESPnet model (`--model slm_lm`) that trains an slm_lm LM with its kind's objective and scores text."""
from typing import Optional

import torch
from espnet2.lm.espnet_model import ESPnetLanguageModel
from espnet2.torch_utils.device_funcs import force_gatherable

from slm_lm.espnet_lm.base_lm import SlmLMForESPnet
from slm_lm.model import precision

PAD_ID = 0


def sentence_batch(text: torch.Tensor, text_lengths: torch.Tensor, eos_id: int):
    """ESPnet's padded `text` [B, L] -> slm_lm input `<sos/eos> x <sos/eos>` + pad 0, lengths + 2."""
    batch, length = text.shape
    positions = torch.arange(length, device=text.device)
    real = positions[None, :] < text_lengths[:, None]
    tokens = torch.full((batch, length + 2), PAD_ID, dtype=torch.long, device=text.device)
    tokens[:, 0] = eos_id
    tokens[:, 1 : length + 1] = torch.where(real, text.long(), PAD_ID)
    tokens[torch.arange(batch, device=text.device), text_lengths + 1] = eos_id
    return tokens, text_lengths + 2


AUTOCAST_DTYPES = ("auto", "float32", "bfloat16")  # float16 would need a GradScaler


class SlmESPnetLanguageModel(ESPnetLanguageModel):
    """loss = the kind's summed cross-entropy / predicted tokens; weight = predicted tokens.

    An `ESPnetLanguageModel` (ESPnet's LM task builds it from `model: slm_lm` in config.yaml, with the
    LM as `self.lm`, so parameter names are `lm.model.*`) whose `nll` is the kind's sentence score:
    exact for slm/clm/bilm/tta, the pseudo-log-likelihood for mlm. `lm_calc_perplexity` uses it.

    `autocast` (`model_conf: {autocast: bfloat16}`) runs the training/validation loss under
    `torch.autocast` on the batch's device, CPU included (ESPnet's `use_amp` autocasts CUDA only); the
    log-softmax and the summed loss stay in float32 (`gather_logprobs`). `auto` is bfloat16 on devices
    that compute it natively and float32 elsewhere (`slm_lm.model.precision.resolve_dtype`).
    """

    def __init__(self, lm: SlmLMForESPnet, vocab_size: int, ignore_id: int = PAD_ID, autocast: str = "float32"):
        super().__init__(lm, vocab_size, ignore_id)
        if autocast not in AUTOCAST_DTYPES:
            raise ValueError(f"autocast {autocast!r} is not one of {sorted(AUTOCAST_DTYPES)}")
        self.autocast = autocast

    def nll(self, text: torch.Tensor, text_lengths: torch.Tensor, max_length: Optional[int] = None):
        """Negative log-likelihood [B, L + 1] of each token and the end of sentence, and the lengths + 1.

        As ESPnet's: padded positions are 0 and the width is `max_length + 1` when given.
        """
        width = int(text_lengths.max()) if max_length is None else max_length
        tokens, lengths = sentence_batch(text[:, :width], text_lengths, self.eos)
        nll = -self.lm.model.token_logprobs(tokens, lengths)[:, 1:]
        return nll, lengths - 1

    def forward(self, text: torch.Tensor, text_lengths: torch.Tensor, **kwargs):
        tokens, lengths = sentence_batch(text[:, : int(text_lengths.max())], text_lengths, self.eos)
        with precision.autocast(tokens.device, precision.resolve_dtype(self.autocast, tokens.device)):
            loss_sum, n_predicted = self.lm.model.loss(tokens, lengths)
        loss = loss_sum / n_predicted
        stats = dict(loss=loss.detach())
        weight = n_predicted.detach()
        return force_gatherable((loss, stats, weight), loss.device)
