"""The ESPnet LM class of each slm_lm kind, for `--lm <kind>` (`LM_CLASSES`, registered by `registry`).

The classes live one concept a module, as ESPnet's own LMs in `espnet2/lm/`: `base_lm` (the `AbsLM` base),
`causal_lm` (the clm, usable in beam search) and `bidirectional_lm` (slm, mlm, bilm, tta: N-best rescoring
only). This module names them all, so `slm_lm.espnet_lm.lm.<class>` imports each.
"""
from slm_lm.espnet_lm.base_lm import SlmLMForESPnet
from slm_lm.espnet_lm.bidirectional_lm import (BiLMForESPnet, BidirectionalLMError, BidirectionalLMForESPnet,
                                               MaskedLMForESPnet, SlidingLMForESPnet, TextAutoencoderLMForESPnet,
                                               not_for_beam_search)
from slm_lm.espnet_lm.causal_lm import CausalLMForESPnet

__all__ = ["SlmLMForESPnet", "BidirectionalLMError", "BidirectionalLMForESPnet", "SlidingLMForESPnet",
           "MaskedLMForESPnet", "BiLMForESPnet", "TextAutoencoderLMForESPnet", "CausalLMForESPnet",
           "not_for_beam_search", "LM_CLASSES", "BIDIRECTIONAL_KINDS"]

LM_CLASSES = {cls.kind: cls for cls in (SlidingLMForESPnet, CausalLMForESPnet, MaskedLMForESPnet, BiLMForESPnet,
                                        TextAutoencoderLMForESPnet)}
BIDIRECTIONAL_KINDS = tuple(k for k, cls in LM_CLASSES.items() if issubclass(cls, BidirectionalLMForESPnet))
