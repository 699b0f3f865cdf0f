"""Per-scorer acoustic scores of given hypotheses, recomputed with an ESPnet ASR model by teacher forcing.

ESPnet's `asr_inference` writes each hypothesis's total score only (decoder, CTC, length bonus and any
fused LM, weighted). `AmScorer` gives the unweighted parts, as ESPnet's beam search sums them: the
decoder's log-probability of the tokens and the end of sentence, the CTC log-likelihood of the tokens
(all alignments; the beam search's CTC prefix score of the finished hypothesis), and the length bonus
(the number of tokens with the end of sentence). The hypotheses of one utterance go through the decoder
and CTC as one batch over a single encoding of the utterance.
"""
import argparse
import warnings

import numpy as np
import torch
from espnet2.tasks.asr import ASRTask
from torch.nn.utils.rnn import pad_sequence

from slm_lm.common.errors import InputError
from slm_lm.model.directory import load_torch

# what ESPnet's model builders raise for a config they cannot build
_BUILD_ERRORS = (AssertionError, AttributeError, KeyError, RuntimeError, TypeError, ValueError)


class AmScorer:
    """An ESPnet ASR experiment (`config.yaml` as read, `config`, + checkpoint) that scores token-id hypotheses
    of an utterance. Unlike ESPnet's `build_model_from_file` (strict=False), every weight must match the
    model the config describes: a checkpoint of another model is refused, not partly loaded."""

    def __init__(self, config: dict, asr_config: str, asr_model: str, device: str = "cpu"):
        try:
            model = ASRTask.build_model(argparse.Namespace(**config))
        except _BUILD_ERRORS as e:
            raise InputError(f"{asr_config}: cannot build the ASR model it describes ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:300]})") from None
        state = load_torch(asr_model)
        state = state.get("module", state)  # a deepspeed checkpoint, as ESPnet takes it
        try:
            model.load_state_dict(state)
        except RuntimeError as e:
            first = next((line.strip() for line in str(e).splitlines()[1:] if line.strip()), str(e))
            raise InputError(f"{asr_model}: weights do not match the model of --asr-config {asr_config} "
                             f"({first[:300]})") from None
        self.model = model.to(device).eval()
        self.device = device

    @torch.no_grad()
    def scores(self, speech: np.ndarray, hypotheses: list[list[int]]) -> list[dict[str, float]]:
        """{"decoder", "ctc", "length_bonus"} of each hypothesis (token ids without <sos/eos>) of one
        utterance's waveform; a model without a decoder or without CTC lacks that key."""
        if not hypotheses:
            return []
        with warnings.catch_warnings():  # torch's deprecation of the autocast in ESPnet's own encode
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"espnet2\.")
            return self._scores(speech, hypotheses)

    def _scores(self, speech: np.ndarray, hypotheses: list[list[int]]) -> list[dict[str, float]]:
        model = self.model
        speech = torch.as_tensor(speech, dtype=torch.float32, device=self.device)[None]
        encoded, encoded_lengths = model.encode(speech, torch.tensor([speech.shape[1]], device=self.device))
        if isinstance(encoded, tuple):  # with intermediate CTC outputs
            encoded = encoded[0]
        n = len(hypotheses)
        encoded, encoded_lengths = encoded.expand(n, -1, -1), encoded_lengths.expand(n)
        tokens = [torch.tensor(h, dtype=torch.long, device=self.device) for h in hypotheses]
        lengths = torch.tensor([len(h) for h in hypotheses], device=self.device)
        out = [{"length_bonus": float(len(h) + 1)} for h in hypotheses]
        if model.decoder is not None:
            sos = torch.tensor([model.sos], device=self.device)
            eos = torch.tensor([model.eos], device=self.device)
            inputs = pad_sequence([torch.cat([sos, t]) for t in tokens], batch_first=True, padding_value=model.eos)
            targets = pad_sequence([torch.cat([t, eos]) for t in tokens], batch_first=True, padding_value=-1)
            logits = model.decoder(encoded, encoded_lengths, inputs, lengths + 1)[0]
            logprobs = logits.float().log_softmax(-1).gather(-1, targets.clamp(min=0)[..., None])[..., 0]
            for score, decoder in zip(out, (logprobs * (targets >= 0)).sum(-1).tolist()):
                score["decoder"] = decoder
        if model.ctc is not None:
            ctc_logprobs = model.ctc.log_softmax(encoded).float().transpose(0, 1)
            padded = pad_sequence(tokens, batch_first=True, padding_value=0)
            ctc = -torch.nn.functional.ctc_loss(ctc_logprobs, padded, encoded_lengths, lengths, blank=model.blank_id,
                                                reduction="none", zero_infinity=False)
            for score, value in zip(out, ctc.tolist()):
                score["ctc"] = value
        return out
