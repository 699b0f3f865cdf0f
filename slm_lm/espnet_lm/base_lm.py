"""The base of the slm_lm LM classes for ESPnet: an slm_lm model of one kind under ESPnet's `AbsLM` type."""
from espnet2.lm.abs_model import AbsLM

from slm_lm.model.directory import rename_espnet_model_alias
from slm_lm.model.kinds import LanguageModel, build_lm


class SlmLMForESPnet(AbsLM):
    """An slm_lm LM of the class's `kind` under ESPnet's `AbsLM` type; the slm_lm model is `self.model`.

    `--lm_conf` takes `size` (tiny, mini, small, base) and any `LMConfig` field as an override. A checkpoint
    whose keys name the model `lm.backbone.*` loads as `lm.model.*` (`rename_espnet_model_alias`).
    """

    kind = ""

    def __init__(self, vocab_size: int, size: str = "small", **overrides):
        super().__init__()
        self.model: LanguageModel = build_lm(self.kind, vocab_size, size, **overrides)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        rename_espnet_model_alias(state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
