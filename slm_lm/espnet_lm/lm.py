"""Thin ESPnet `AbsLM` classes wrapping the slm_lm backbones, one per kind, for `--lm <kind>`."""
import torch
from espnet2.lm.abs_model import AbsLM

from slm_lm.models import LanguageModel, build_lm


class SlmLMForESPnet(AbsLM):
    """An slm_lm LM of the class's `kind` under ESPnet's `AbsLM` type; the model is `self.backbone`.

    `--lm_conf` takes `size` (tiny, mini, small, base) and any `LMConfig` field as an override.
    These LMs are trained on whole sentences and score whole sentences (`slm_lm.scorer.Scorer`);
    they are not incremental LMs for ESPnet's beam search, so `forward(input, hidden)` is unsupported.
    """

    kind = ""

    def __init__(self, vocab_size: int, size: str = "small", **overrides):
        super().__init__()
        self.backbone: LanguageModel = build_lm(self.kind, vocab_size, size, **overrides)

    def forward(self, input: torch.Tensor, hidden: torch.Tensor):
        raise NotImplementedError(
            f"the slm_lm {self.kind!r} LM scores whole sentences (slm_lm.scorer.Scorer, N-best rescoring); "
            "it is not an incremental LM for ESPnet shallow fusion"
        )


class SlidingLMForESPnet(SlmLMForESPnet):
    """Sliding LM (Transcormer)."""

    kind = "slm"


class CausalLMForESPnet(SlmLMForESPnet):
    """Causal (GPT-style) LM on the same backbone."""

    kind = "clm"


class MaskedLMForESPnet(SlmLMForESPnet):
    """Masked (BERT-style) LM on the same backbone."""

    kind = "mlm"


class BiLMForESPnet(SlmLMForESPnet):
    """ELMo-style bidirectional LM on the same backbone."""

    kind = "bilm"


class TextAutoencoderLMForESPnet(SlmLMForESPnet):
    """T-TA (Transformer-based text autoencoder) on the same backbone."""

    kind = "tta"


LM_CLASSES = {cls.kind: cls for cls in (SlidingLMForESPnet, CausalLMForESPnet, MaskedLMForESPnet, BiLMForESPnet,
                                        TextAutoencoderLMForESPnet)}
