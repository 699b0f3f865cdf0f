"""The five LM kinds on one backbone: sliding (SLM), causal (CLM), masked (MLM), ELMo-style Bi-LM and
T-TA (Transformer-based text autoencoder).

Scoring (`token_logprobs`) takes a padded batch: `tokens` [B, T] = `<s> x_1 .. x_n </s>` + padding and
`lengths` [B] = n + 2, and scores the same positions for every kind: 1 .. length-1 (every real token and
the end of sentence). Position 0 and padding get 0. Log-probabilities are normalised over the whole
vocabulary, special symbols included.

Training (`packed_loss`) takes rows of several whole sentences (`tokens`, `sentences`: see
`slm_lm.model.backbone`) and scores each sentence as if it were alone; it never reads a figure back to the host
(no data-dependent shapes), so a step can be queued, compiled and captured whole. `loss` is the same
objective on a padded batch.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from slm_lm.model.backbone import (
    PADDING,
    Embeddings,
    LMHead,
    TransformerLayer,
    block_mask,
    causal_mask,
    check_batch,
    has_next,
    init_weights,
    next_word_start,
    padded_sentences,
    rest_of_word,
    scored_positions,
    self_blind_mask,
    sentence_mask,
    sentence_positions,
    sliding_masks,
)
from slm_lm.model.config import LMConfig


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax (in float32 or wider) of `logits` [..., V] taken at `targets` [...]."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def summed_ce(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Sum of the cross-entropy (in float32 or wider) of `logits` [..., V] at `targets` [...], each position
    weighted by `weights` [...] (0: not counted)."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    ce = F.cross_entropy(logits.flatten(0, -2), targets.flatten(), reduction="none")
    return (ce * weights.flatten().to(ce.dtype)).sum()


class LanguageModel(nn.Module):
    """Shared parts: config, embeddings, tied head, and the scoring/loss contract.

    Each kind but the MLM gives `_predicting_states`: at every position i, the state [B, T, d] that the head
    reads to predict x_i.
    """

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.config = cfg
        self.embed = Embeddings(cfg)
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.n_layers))
        self.head = LMHead(cfg, self.embed.tokens)

    def token_logprobs(self, tokens: torch.Tensor, lengths: torch.Tensor, word_starts=None) -> torch.Tensor:
        """log P(x_i | the context this kind allows) at positions 1..length-1, 0 elsewhere: [B, T].

        `word_starts` [B, T] (True where a word begins) hides the rest of x_i's own word from its right
        context: each word is then scored left to right given the whole words around it.
        """
        check_batch(tokens, lengths, self.config.max_positions)
        sentences = padded_sentences(lengths, tokens.shape[1])
        mask = scored_positions(sentences)
        logprobs = self._scored_logprobs(tokens, sentences, mask, word_starts)
        out = logprobs.new_zeros(tokens.shape)
        out[mask] = logprobs
        return out

    def _scored_logprobs(self, tokens, sentences, mask, word_starts) -> torch.Tensor:
        """Log-probs of tokens[mask], in row-major order of `mask` (the head only where it is read)."""
        states = self._predicting_states(tokens, sentences, word_starts)
        return gather_logprobs(self.head(states[mask]), tokens[mask])

    def loss(self, tokens: torch.Tensor, lengths: torch.Tensor, word_starts=None, **options):
        """`packed_loss` of a padded batch (`tokens` [B, T], `lengths` [B], as `token_logprobs`)."""
        check_batch(tokens, lengths, self.config.max_positions)
        return self.packed_loss(tokens, padded_sentences(lengths, tokens.shape[1]), word_starts, **options)

    def packed_loss(self, tokens: torch.Tensor, sentences: torch.Tensor, word_starts=None):
        """(summed cross-entropy of this kind's training objective, number of predicted tokens), both tensors,
        on rows of sentences (`slm_lm.model.backbone`); with `word_starts`, the objective of whole-word scoring (see
        `token_logprobs`)."""
        scored = scored_positions(sentences)
        states = self._predicting_states(tokens, sentences, word_starts)
        return summed_ce(self.head(states), tokens, scored), scored.sum()

    def _predicting_states(self, tokens, sentences, word_starts) -> torch.Tensor:
        raise NotImplementedError


class SlidingLM(LanguageModel):
    """Transcormer: triple-stream self-attention; query i sees forward states j < i and backward j > i.

    `attention` is "sdpa" (boolean masks) or "flex" (FlexAttention block masks: the same scores; fused
    and compiled on CUDA, with no attention dropout; eager and inference-only on CPU).
    """

    attention = "sdpa"

    def _streams(self, tokens, sentences, word_starts=None):
        """(content streams read by the last layer [2B, T, d], final query stream [B, T, d])."""
        b = tokens.shape[0]
        positions = sentence_positions(sentences)
        content_mask, query_mask = sliding_masks(sentences, word_starts)
        if self.attention == "flex":
            content_mask, query_mask = block_mask(content_mask), block_mask(query_mask)
        content = self.embed(tokens, positions).repeat(2, 1, 1)  # [forward stream; backward stream]: [2B, T, d]
        q = self.embed.query_stream(self.config.mask_id, positions)
        last = len(self.layers) - 1
        for depth, layer in enumerate(self.layers):
            if depth == last:  # the final content streams are discarded: only their keys and values are read
                kc, vc = layer.project_key_value(content)
            else:
                qc, kc, vc = layer.project(content)
            keys = torch.cat([kc[:b], kc[b:]], dim=2)  # [B, H, 2T, d]: forward half, backward half
            values = torch.cat([vc[:b], vc[b:]], dim=2)
            query = layer.attend(layer.project_query(q), keys, values, mask=query_mask)
            if depth == last:
                return content, layer.finish(q, query)
            attended = torch.cat([layer.attend(qc, kc, vc, mask=content_mask), query])
            content, q = layer.finish(torch.cat([content, q]), attended).split([2 * b, b])

    def _predicting_states(self, tokens, sentences, word_starts):
        return self._streams(tokens, sentences, word_starts)[1]

    def packed_loss(self, tokens: torch.Tensor, sentences: torch.Tensor, word_starts=None, content_weight: float = 0.0,
                    content_sample: float = 1.0):
        """The query stream's summed CE and its token count, as every kind (`word_starts`: whole words).

        With `content_weight` w > 0 (a training option, not in the paper), w times the CE of the content
        streams the last layer reads is added: the forward state at i-1 predicts x_i (as a CLM) and the
        backward state at i+1 predicts x_i (as a right-to-left LM, for every i but the final </s>), both
        through the shared head, at a random `content_sample` share of the positions (weighted by
        1 / `content_sample`, so the sum is unbiased). The count stays the query stream's, so CE figures stay
        comparable.
        """
        b = tokens.shape[0]
        scored = scored_positions(sentences)
        content, q = self._streams(tokens, sentences, word_starts)
        total = summed_ce(self.head(q), tokens, scored)
        if content_weight > 0:
            left = F.pad(content[:b], (0, 0, 1, 0))[:, :-1]  # row i: the forward state at i-1
            right = F.pad(content[b:], (0, 0, 0, 1))[:, 1:]  # row i: the backward state at i+1
            from_left, from_right = scored, scored & has_next(sentences)  # the final </s> has no right
            if content_sample < 1.0:
                sampled = torch.rand(2, *tokens.shape, device=tokens.device) < content_sample
                from_left, from_right = from_left & sampled[0], from_right & sampled[1]
            neighbours = summed_ce(self.head(left), tokens, from_left) + summed_ce(self.head(right), tokens, from_right)
            total = total + content_weight * neighbours / content_sample
        return total, scored.sum()


class CausalLM(LanguageModel):
    """GPT-style: log P(x_i | x_<i), read from the state at i-1."""

    def _predicting_states(self, tokens, sentences, word_starts):
        # word_starts changes nothing: the left context never holds the rest of x_i's word.
        h = self.embed(tokens, sentence_positions(sentences))
        mask = causal_mask(sentences)
        for layer in self.layers:
            h = layer(h, mask=mask)
        return F.pad(h, (0, 0, 1, 0))[:, :-1]  # row i holds the state at i-1


class MaskedLM(LanguageModel):
    """BERT-style. Scoring is the pseudo-log-likelihood: one masked copy per group of positions.

    `k` tokens are masked per pass (k=1: classic PLL, n passes). `k` may also be "n/m": m passes with
    the positions split into m groups. Groups are a seeded random partition (`seed`), so every position
    is scored exactly once and results are reproducible. Copies run in chunks of at most
    `max_tokens` tokens, never all at once.
    """

    def __init__(self, cfg: LMConfig, k=1, seed: int = 0, max_tokens: int = 16384):
        super().__init__(cfg)
        self.k, self.seed, self.max_tokens = k, seed, max_tokens

    def encode(self, tokens: torch.Tensor, sentences: torch.Tensor) -> torch.Tensor:
        """Bidirectional encoder states [B, T, d], each sentence seeing itself only."""
        h = self.embed(tokens, sentence_positions(sentences))
        mask = sentence_mask(sentences)
        for layer in self.layers:
            h = layer(h, mask=mask)
        return h

    def groups(self, n: int) -> list:
        """Partition of positions 1..n into groups masked together in one pass."""
        if isinstance(self.k, str):
            num, _, den = self.k.partition("/")
            if num != "n" or not den.isdigit() or int(den) < 1:
                raise ValueError(f"k must be a positive int or 'n/m', got {self.k!r}")
            n_groups = min(n, int(den))
        else:
            if int(self.k) < 1:
                raise ValueError(f"k must be >= 1, got {self.k}")
            n_groups = math.ceil(n / int(self.k))
        positions = torch.arange(1, n + 1)
        if n_groups < n:
            generator = torch.Generator().manual_seed(self.seed + n)
            positions = positions[torch.randperm(n, generator=generator)] if n_groups > 1 else positions
        return [g for g in positions.tensor_split(n_groups) if len(g)]

    def _scored_logprobs(self, tokens, sentences, mask, word_starts):
        t = tokens.shape[1]
        lengths = (sentences != PADDING).sum(dim=1)
        rows, masks = [], []
        for row, length in enumerate(lengths.tolist()):
            for group in self.groups(length - 1):
                m = torch.zeros(t, dtype=torch.bool)
                m[group] = True
                rows.append(row)
                masks.append(m)
        rows = torch.tensor(rows, device=tokens.device)
        masks = torch.stack(masks).to(tokens.device)
        hidden = rest_of_word(word_starts) if word_starts is not None else None
        out = None
        chunk = max(1, self.max_tokens // t)
        for start in range(0, len(rows), chunk):
            r, m = rows[start : start + chunk], masks[start : start + chunk]
            masked = m
            if hidden is not None:  # PLL-word-l2r: also mask the later pieces of each predicted word
                masked = m | (m[:, :, None] & hidden[r]).any(dim=1)
            copies = tokens[r].masked_fill(masked, self.config.mask_id)
            h = self.encode(copies, sentences[r])
            logprobs = gather_logprobs(self.head(h[m]), tokens[r][m])
            if out is None:
                out = logprobs.new_zeros(tokens.shape)
            out[r[:, None].expand_as(m)[m], m.nonzero()[:, 1]] = logprobs
        return out[mask]

    def packed_loss(self, tokens: torch.Tensor, sentences: torch.Tensor, word_starts=None):
        """BERT objective: 15% of each sentence's positions 1..length-1 (at least one), 80/10/10 corruption."""
        if word_starts is not None:
            raise ValueError("whole-word training is not implemented for the masked LM")
        return self.masked_loss(tokens, sentences, *self.corrupt(tokens, sentences))

    def corrupt(self, tokens: torch.Tensor, sentences: torch.Tensor):
        """(the predicted positions [B, T], the corrupted tokens): 15 % of each sentence's scored positions
        and the one of least noise, drawn at random; of them 80 % `<mask>`, 10 % a random piece, 10 % kept."""
        scored = scored_positions(sentences)
        noise = torch.rand(tokens.shape, device=tokens.device).masked_fill(~scored, 2.0)
        slot = torch.where(sentences == PADDING, tokens.shape[1], sentences)  # a sentence number is < T
        least = noise.new_full((len(tokens), tokens.shape[1] + 1), 2.0).scatter_reduce(1, slot, noise, "amin")
        selected = ((noise < 0.15) | (noise == least.gather(1, slot))) & scored  # one per sentence at least
        action = torch.rand(tokens.shape, device=tokens.device)
        replace_mask = selected & (action < 0.8)
        replace_random = selected & (action >= 0.8) & (action < 0.9)
        # Random replacements come from the ordinary pieces (ids 2 .. V-3 in the token-list layout).
        random_tokens = torch.randint(2, max(3, self.config.vocab_size - 2), tokens.shape, device=tokens.device)
        corrupted = tokens.masked_fill(replace_mask, self.config.mask_id)
        return selected, torch.where(replace_random, random_tokens, corrupted)

    def masked_loss(self, tokens, sentences, selected, corrupted):
        """(summed CE of `tokens` at the `selected` positions given the `corrupted` rows, their number)."""
        return summed_ce(self.head(self.encode(corrupted, sentences)), tokens, selected), selected.sum()


class BiLM(LanguageModel):
    """ELMo-style: separate forward and backward towers joined only at the output.

    x_i is predicted from [forward state at i-1 ; backward state at i+1] through one projection and the
    shared head. For the final </s> there is no right context: a learned "empty context" vector stands
    in for the backward state.
    """

    def __init__(self, cfg: LMConfig):
        super().__init__(cfg)
        self.backward_layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.n_layers))
        self.join = nn.Linear(2 * cfg.d_model, cfg.d_model)
        self.empty_context = nn.Parameter(torch.zeros(cfg.d_model))

    def _predicting_states(self, tokens, sentences, word_starts):
        x = self.embed(tokens, sentence_positions(sentences))
        f = x
        forward_mask = causal_mask(sentences)
        for layer in self.layers:
            f = layer(f, mask=forward_mask)
        content_mask, _ = sliding_masks(sentences)
        backward_mask = content_mask[len(tokens) :]
        bw = x
        for layer in self.backward_layers:
            bw = layer(bw, mask=backward_mask)
        # Row i of `left` is the forward state at i-1; row i of `right` the backward state at i+1,
        # or the empty-context vector where i+1 is past the sentence (the final </s>).
        left = F.pad(f, (0, 0, 1, 0))[:, :-1]
        if word_starts is None:
            right = F.pad(bw, (0, 0, 0, 1))[:, 1:]
            has_right = has_next(sentences)
        else:  # the backward state at the next word's start: the rest of x_i's word stays unseen
            after = next_word_start(word_starts)
            padded = F.pad(sentences, (0, 1), value=PADDING)  # column T: past the row
            has_right = (padded.gather(1, after) == sentences) & (sentences != PADDING)
            right = F.pad(bw, (0, 0, 0, 1)).gather(1, after[..., None].expand(-1, -1, bw.shape[-1]))
        right = torch.where(has_right[..., None], right, self.empty_context.to(bw.dtype))
        return self.join(torch.cat([left, right], dim=-1))


class TextAutoencoderLM(LanguageModel):
    """T-TA (Shin et al., ACL 2020): log P(x_i | x_<i, x_>i) for every i in one pass, one stream.

    Every layer's queries come from the previous layer's output, but its keys and values are always the
    input embeddings (token + position, after the embedding LayerNorm), projected by that layer's
    weights. Query i may attend every position of its sentence except i itself, so no state at position i
    ever holds x_i. Unlike the SLM, there is no content stream to update: each layer costs one SDPA call
    over T keys.

    First-layer query input: the paper gives the queries position information only (no token), and
    the authors' code (github.com/joongbo/tta, modeling.py) builds it as the embedding of a constant
    [MASK] id plus the position embedding, through the embedding LayerNorm. We do the same: the
    `<mask>` embedding + position (`Embeddings.query_stream`, the SLM's query input), so a T-TA has
    exactly the parameters of an SLM or MLM of the same size.
    """

    def _predicting_states(self, tokens, sentences, word_starts):
        positions = sentence_positions(sentences)
        inputs = self.embed(tokens, positions)
        q = self.embed.query_stream(self.config.mask_id, positions)
        blind = self_blind_mask(sentences, word_starts)
        for layer in self.layers:
            keys, values = layer.project_key_value(inputs)
            q = layer.finish(q, layer.attend(layer.project_query(q), keys, values, mask=blind))
        return q


MODELS = {"slm": SlidingLM, "clm": CausalLM, "mlm": MaskedLM, "bilm": BiLM, "tta": TextAutoencoderLM}


def build_lm(kind: str, vocab_size: int, size: str = "small", **overrides) -> LanguageModel:
    """An LM of `kind` (slm, clm, mlm, bilm, tta) and named `size` (tiny, mini, small, base), BERT-initialised."""
    return model_from_config(LMConfig.from_size(kind, vocab_size, size, **overrides))


def model_from_config(cfg: LMConfig) -> LanguageModel:
    """A freshly initialised model for `cfg`."""
    model = MODELS[cfg.kind](cfg)
    init_weights(model)
    if isinstance(model, BiLM):
        nn.init.normal_(model.empty_context, std=0.02)
    return model
