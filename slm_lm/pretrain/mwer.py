"""The minimum word error rate (MWER) loss of discriminative training on N-best lists (Prabhavalkar et al.,
ICASSP 2018; RescoreBERT, Xu et al., ICASSP 2022).

Per utterance u, each hypothesis i has the total score of rescoring

    total_ui = fixed_ui + lambda * LM_theta(i),

fixed_ui being what training does not change (the AM score, and other LM columns such as ``score:lm`` times
their weights) and LM_theta(i) the trained LM's sentence log-probability (natural log). Their posterior is
P_ui = softmax_i(scale * total_ui) over the utterance's real hypotheses, ``scale`` a stated score scale
(an inverse temperature); the loss is the expected number of word errors minus the N-best's mean,

    mwer_u = sum_i P_ui * (errors_ui - mean_i errors_ui),

whose gradient is that of the expected errors (the posterior sums to 1): the mean only centres the value.
Training may mix in the LM's own loss on the references (:func:`mixed_loss`), so that the model stays a language
model.
"""
import torch


def mwer_per_utterance(fixed: torch.Tensor, lm: torch.Tensor, errors: torch.Tensor, real: torch.Tensor,
                       lam: float, scale: float = 1.0) -> torch.Tensor:
    """The MWER loss of each utterance, [U], from [U, N] tensors: the fixed part of the totals, the trained
    LM's sentence log-probs, the word errors and ``real`` (False at padding, which gets no probability)."""
    totals = (fixed + lam * lm) * scale
    posterior = torch.softmax(totals.masked_fill(~real, float("-inf")), dim=1)
    errors = errors.to(posterior.dtype).masked_fill(~real, 0.0)
    mean = errors.sum(1, keepdim=True) / real.sum(1, keepdim=True)
    return (posterior * (errors - mean)).masked_fill(~real, 0.0).sum(1)


def mixed_loss(mwer: torch.Tensor, ce_sum: torch.Tensor | None, ce_tokens: int, lm_weight: float) -> torch.Tensor:
    """The training objective of a batch: the mean MWER loss of its utterances plus ``lm_weight`` times the
    LM's own cross-entropy per token on their references (``ce_sum`` over ``ce_tokens`` tokens)."""
    loss = mwer.mean()
    if lm_weight and ce_sum is not None:
        loss = loss + lm_weight * ce_sum / max(1, ce_tokens)
    return loss
