"""The Transformer backbone every LM kind shares: BERT-style embeddings, post-LN layers, tied LM head.

A batch is rows of sentences: `tokens` [B, T] and `sentences` [B, T], the number of each token's sentence in
its row (PADDING after the row's last sentence). Each sentence is `<s> x_1 .. x_n </s>`, its positions
restart at 0, and attention never crosses from one sentence to another. A padded batch of one sentence a
row (`tokens`, `lengths`) is the special case `padded_sentences(lengths, T)`.

Attention uses `torch.nn.functional.scaled_dot_product_attention` (fused kernels on CPU and GPU) with
boolean masks (True = may attend) built from the sentence numbers, or FlexAttention with the same masks as
block masks (`block_mask`).
"""
import functools

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from slm_lm.model.config import LMConfig


class Embeddings(nn.Module):
    """Token + learned absolute position embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.positions = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """`positions` [B, T]: each token's position in its sentence (`sentence_positions`)."""
        return self.dropout(self.norm(self.tokens(tokens) + self.positions(positions)))

    def query_stream(self, mask_id: int, positions: torch.Tensor) -> torch.Tensor:
        """SLM and T-TA query-stream input: the <mask> embedding plus each position's embedding."""
        return self(torch.full_like(positions, mask_id), positions)


class TransformerLayer(nn.Module):
    """Post-LN layer: x = LN(x + Attn(x)); x = LN(x + FFN(x)).

    `project` and `finish` are exposed separately so that the sliding LM can run several streams
    through the same weights while computing keys/values once.
    """

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.d_model = cfg.d_model
        self.dropout_p = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.attn_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.ff = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model)
        )
        self.ff_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_model // self.n_heads).transpose(1, 2)

    def project(self, x: torch.Tensor):
        """Queries, keys and values, each [B, H, T, d_head]."""
        return [self._heads(part) for part in self.qkv(x).split(self.d_model, dim=-1)]

    def project_query(self, x: torch.Tensor) -> torch.Tensor:
        """Queries only (the SLM query stream supplies no keys or values)."""
        w, b = self.qkv.weight[: self.d_model], self.qkv.bias[: self.d_model]
        return self._heads(F.linear(x, w, b))

    def project_key_value(self, x: torch.Tensor):
        """Keys and values only (T-TA's input embeddings; the SLM's content streams in its last layer)."""
        w, b = self.qkv.weight[self.d_model :], self.qkv.bias[self.d_model :]
        return [self._heads(part) for part in F.linear(x, w, b).split(self.d_model, dim=-1)]

    def attend(self, q, k, v, mask=None, is_causal=False) -> torch.Tensor:
        """Scaled dot-product attention, heads merged back: [B, T, d_model]. `mask`: boolean, or a
        FlexAttention `BlockMask` (`block_mask`; no dropout).

        On CPU it runs in float32 under bf16/fp16 autocast too (the result is cast back): PyTorch's CPU
        flash-attention backward is about 8x slower in bf16 than in fp32, which cancels bf16's faster
        matmuls at our sizes (BENCHMARKS.md).
        """
        p = self.dropout_p if self.training else 0.0
        if isinstance(mask, BlockMask):
            if p:
                raise ValueError("FlexAttention has no attention dropout: train with dropout 0 or SDPA")
            a = flex(q.device.type)(q, k, v, block_mask=mask)
        elif q.device.type == "cpu" and q.dtype != torch.float32:
            with torch.autocast("cpu", enabled=False):
                a = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=p,
                                                   is_causal=is_causal).to(q.dtype)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal)
        b, h, t, d = a.shape
        return a.transpose(1, 2).reshape(b, t, h * d)

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Output projection, residuals, FFN and the two LayerNorms."""
        x = self.attn_norm(x + self.dropout(self.out(attended)))
        return self.ff_norm(x + self.dropout(self.ff(x)))

    def forward(self, x: torch.Tensor, mask=None, is_causal=False) -> torch.Tensor:
        return self.finish(x, self.attend(*self.project(x), mask=mask, is_causal=is_causal))


class LMHead(nn.Module):
    """dense -> gelu -> LayerNorm -> projection tied to the token embedding (+ bias)."""

    def __init__(self, cfg: LMConfig, embedding: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.embedding = embedding
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(F.gelu(self.dense(h))), self.embedding.weight, self.bias)


@functools.cache
def flex(device_type: str):
    """FlexAttention for `device_type`: compiled (fused kernels; a second shape recompiles it for dynamic
    shapes) on CUDA; eager on CPU, where it serves to check equal scores (unfused, inference only)."""
    return torch.compile(flex_attention) if device_type == "cuda" else flex_attention


def block_mask(mask: torch.Tensor) -> BlockMask:
    """The FlexAttention block mask of a boolean mask [B, 1, Q, K] (True = may attend): blocks without an
    allowed pair are skipped, the others read `mask`."""
    b, _, q, k = mask.shape
    return create_block_mask(lambda bi, h, qi, ki: mask[bi, 0, qi, ki], b, None, q, k, device=mask.device)


def init_weights(module: nn.Module) -> None:
    """BERT initialisation: N(0, 0.02) weights, zero biases, unit LayerNorms."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


PADDING = -1  # the sentence number of the padding after a row's last sentence


def valid_mask(lengths: torch.Tensor, length: int) -> torch.Tensor:
    """[B, T] True at real (non-padding) positions."""
    return torch.arange(length, device=lengths.device)[None, :] < lengths[:, None]


def padded_sentences(lengths: torch.Tensor, length: int) -> torch.Tensor:
    """The sentence numbers [B, T] of a padded batch: sentence 0 in each row, then PADDING."""
    return torch.where(valid_mask(lengths, length), 0, PADDING)


def sentence_positions(sentences: torch.Tensor) -> torch.Tensor:
    """[B, T] each token's position in its sentence: 0 where its sentence number changes, then 1, 2, ..."""
    index = torch.arange(sentences.shape[1], device=sentences.device).expand_as(sentences)
    starts = torch.ones_like(sentences, dtype=torch.bool)
    starts[:, 1:] = sentences[:, 1:] != sentences[:, :-1]
    return index - torch.where(starts, index, 0).cummax(dim=1).values


def scored_positions(sentences: torch.Tensor) -> torch.Tensor:
    """[B, T] True at the positions every kind scores: each sentence's 1 .. length-1 (all but its `<s>`)."""
    return (sentences != PADDING) & (sentence_positions(sentences) > 0)


def has_next(sentences: torch.Tensor) -> torch.Tensor:
    """[B, T] True where the next token is of the same sentence (not past its `</s>`)."""
    same = sentences[:, 1:] == sentences[:, :-1]
    return F.pad(same, (0, 1)) & (sentences != PADDING)


def _pairs(sentences: torch.Tensor):
    """(same sentence [B, T, T], j < i [T, T], j > i [T, T], j == i [T, T]) for query i and key j."""
    i = torch.arange(sentences.shape[1], device=sentences.device)
    same = sentences[:, :, None] == sentences[:, None, :]
    return same, i[None, :] < i[:, None], i[None, :] > i[:, None], i[None, :] == i[:, None]


def _padding_sees_itself(mask: torch.Tensor, sentences: torch.Tensor, eye: torch.Tensor) -> torch.Tensor:
    """`mask` [B, Q, K] with each padding query allowed its own position: no row is empty (SDPA would give NaN)."""
    return mask | (eye & (sentences == PADDING)[:, :, None])


def causal_mask(sentences: torch.Tensor) -> torch.Tensor:
    """[B, 1, T, T] causal attention within each sentence: j <= i in i's sentence."""
    same, before, _, eye = _pairs(sentences)
    return (same & (before | eye))[:, None]


def sentence_mask(sentences: torch.Tensor) -> torch.Tensor:
    """[B, 1, T, T] bidirectional attention within each sentence (the MLM's)."""
    return _pairs(sentences)[0][:, None]


def sliding_masks(sentences: torch.Tensor, word_starts=None):
    """Masks of the triple-stream attention.

    Returns (content [2B, 1, T, T], query [B, 1, T, 2T]). Content rows 0..B-1 are the forward stream
    (j <= i), rows B..2B-1 the backward stream (j >= i), both within i's sentence. The query stream
    attends the forward half for j < i and the backward half for j > i: it never sees x_i. With
    `word_starts` [B, T] (True where a word begins) the backward half is further limited to the words after
    x_i's word: x_i is then predicted from x_<i and the whole words to its right, never from the rest of its
    own word. A padding query may attend to its own position, so that no row is empty.
    """
    same, before, after, eye = _pairs(sentences)
    forward = same & (before | eye)
    backward = same & (after | eye)
    content = torch.cat([forward, backward])[:, None]
    right = same & after
    if word_starts is not None:
        right = right & ~rest_of_word(word_starts)
    left = _padding_sees_itself(same & before, sentences, eye)
    return content, torch.cat([left, right], dim=-1)[:, None]


def rest_of_word(word_starts: torch.Tensor) -> torch.Tensor:
    """[B, T, T] True at (i, j) where j > i lies in the same word as i (`word_starts` [B, T]: True where
    a word begins): the pieces that whole-word scoring hides from position i."""
    word = word_starts.long().cumsum(dim=1)  # [B, T] word index of each position
    i = torch.arange(word.shape[1], device=word.device)
    return (word[:, None, :] == word[:, :, None]) & (i[None, :] > i[:, None])


def next_word_start(word_starts: torch.Tensor) -> torch.Tensor:
    """[B, T] position of the next word's start after i (the first word start at j > i; T if none)."""
    t = word_starts.shape[1]
    starts = torch.where(word_starts, torch.arange(t, device=word_starts.device), t)
    later = torch.cat([starts[:, 1:], starts.new_full((len(starts), 1), t)], dim=1)  # row i: start at i+1
    return later.flip(1).cummin(dim=1).values.flip(1)


def self_blind_mask(sentences: torch.Tensor, word_starts=None) -> torch.Tensor:
    """[B, 1, T, T] T-TA attention mask: query i may attend key j iff j is in i's sentence and j != i
    (and, with `word_starts`, j is not a later piece of i's word: see :func:`rest_of_word`).

    No row is empty: every sentence has at least two positions (<s> and </s>); a padding query may attend to
    its own position.
    """
    same, _, _, eye = _pairs(sentences)
    mask = same & ~eye
    if word_starts is not None:
        mask = mask & ~rest_of_word(word_starts)
    return _padding_sees_itself(mask, sentences, eye)[:, None]


def check_batch(tokens: torch.Tensor, lengths: torch.Tensor, max_positions: int) -> None:
    """Reject batches the models cannot score (each row needs <s> and </s>)."""
    if tokens.dim() != 2 or lengths.dim() != 1 or tokens.shape[0] != lengths.shape[0]:
        raise ValueError(f"expected tokens [B,T] and lengths [B], got {tuple(tokens.shape)} and {tuple(lengths.shape)}")
    if tokens.shape[1] > max_positions:
        raise ValueError(f"sequence length {tokens.shape[1]} exceeds max_positions={max_positions}")
    if len(lengths) and (int(lengths.min()) < 2 or int(lengths.max()) > tokens.shape[1]):
        raise ValueError("every length must be >= 2 (<s> and </s>) and <= the padded length")

