"""The ESPnet model (`AbsESPnetModel`) that trains an slm_lm LM with its kind's objective."""
import torch
from espnet2.torch_utils.device_funcs import force_gatherable
from espnet2.train.abs_espnet_model import AbsESPnetModel

from slm_lm.espnet_lm.lm import SlmLMForESPnet

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


class SlmESPnetLanguageModel(AbsESPnetModel):
    """loss = the kind's summed cross-entropy / predicted tokens; weight = predicted tokens.

    The LM is kept as `self.lm` (as in ESPnet's `ESPnetLanguageModel`), so parameter names are
    `lm.backbone.*` in ESPnet checkpoints.
    """

    def __init__(self, lm: SlmLMForESPnet, vocab_size: int):
        super().__init__()
        self.lm = lm
        self.eos = vocab_size - 1

    def forward(self, text: torch.Tensor, text_lengths: torch.Tensor, **kwargs):
        tokens, lengths = sentence_batch(text[:, : int(text_lengths.max())], text_lengths, self.eos)
        loss_sum, n_predicted = self.lm.backbone.loss(tokens, lengths)
        loss = loss_sum / n_predicted
        stats = dict(loss=loss.detach())
        weight = torch.tensor(n_predicted, device=loss.device)
        return force_gatherable((loss, stats, weight), loss.device)

    def collect_feats(self, text: torch.Tensor, text_lengths: torch.Tensor, **kwargs):
        return {}
