"""Per-scorer acoustic scores of given hypotheses, recomputed with an ESPnet ASR model by teacher forcing.

ESPnet's `asr_inference` writes each hypothesis's total score only (decoder, CTC, length bonus and any
fused LM, weighted). `AmScorer` gives the unweighted parts, as ESPnet's beam search sums them: the
decoder's log-probability of the tokens and the end of sentence, the CTC log-likelihood of the tokens
(all alignments; the beam search's CTC prefix score of the finished hypothesis), and the length bonus
(the number of tokens with the end of sentence). The hypotheses of one utterance go through the decoder
and CTC as one batch over a single encoding of the utterance.
"""
import numpy as np
import torch
from espnet2.tasks.asr import ASRTask
from torch.nn.utils.rnn import pad_sequence


class AmScorer:
    """An ESPnet ASR experiment (`config.yaml` + checkpoint) that scores token-id hypotheses of an utterance."""

    def __init__(self, asr_config: str, asr_model: str, device: str = "cpu"):
        self.model, _ = ASRTask.build_model_from_file(asr_config, asr_model, device)
        self.model.eval()
        self.device = device

    @torch.no_grad()
    def scores(self, speech: np.ndarray, hypotheses: list[list[int]]) -> list[dict[str, float]]:
        """{"decoder", "ctc", "length_bonus"} of each hypothesis (token ids without <sos/eos>) of one
        utterance's waveform; a model without a decoder or without CTC lacks that key."""
        if not hypotheses:
            return []
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
