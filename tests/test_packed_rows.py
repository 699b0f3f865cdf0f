"""Packed rows: sentences packed whole into rows of one shape train exactly as padded ones, each seeing itself only.

Tests that take the `device` fixture run on `pytest --device cuda` too (tests/conftest.py).
"""
import random

import numpy as np
import pytest
import torch

from slm_lm.model import backbone

from slm_lm import build_lm
from slm_lm.model.config import KINDS
from slm_lm.pretrain import PackedRows, Sentences, pack_rows

V = 13  # tiny vocabulary: 0 pad, 1 unk, 2..10 pieces, 11 <mask>, 12 <sos/eos>
EOS = V - 1
ROW = 16
SENTENCES = [[3, 4, 5, 6, 7, 8], [9, 2, 5], [], [4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4], [2, 3], [10, 9, 8, 7], [5]]
WORD_STARTS = torch.tensor([True, True, False, True, False, True, True, False, True, False, True, True, True])


def padded(sentences, device):
    """`<s> x </s>` rows padded with 0: tokens [B, T], lengths [B]."""
    rows = [[EOS, *s, EOS] for s in sentences]
    tokens = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = torch.tensor(r)
    return tokens.to(device), torch.tensor([len(r) for r in rows], device=device)


def packed(sentences, device):
    """The sentences packed in order into rows of ROW tokens, all rows one batch; each sentence's
    (row, first column)."""
    rows = pack_rows([len(s) + 2 for s in sentences], ROW)
    batch = PackedRows(Sentences([np.array(s, dtype=np.int64) for s in sentences], device), rows, ROW, len(rows), EOS)
    assert len(batch) == 1
    where = {}
    for r, row in enumerate(rows):
        column = 0
        for i in row:
            where[i] = (r, column)
            column += len(sentences[i]) + 2
    return (*batch[0], where, batch.predicted[0])


def model_of(kind, device):
    torch.manual_seed(0)
    return build_lm(kind, V, size="tiny", max_positions=32, dropout=0.0).double().to(device)


def loss_and_grads(model, loss):
    """(the summed loss, the count, every parameter's gradient) of one call of `loss`."""
    model.zero_grad(set_to_none=True)
    total, count = loss()
    total.backward()
    return total.detach(), count, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def mlm_loss_pair(model, device):
    """The MLM's loss given one corruption: drawn on the padded batch, the same one laid out in the rows."""
    tokens, lengths = padded(SENTENCES, device)
    rows, sentences, where, _ = packed(SENTENCES, device)
    torch.manual_seed(1)
    selected, corrupted = model.corrupt(tokens, backbone.padded_sentences(lengths, tokens.shape[1]))
    row_selected, row_corrupted = torch.zeros_like(rows, dtype=torch.bool), rows.clone()
    for i, (r, c) in where.items():
        n = int(lengths[i])
        row_selected[r, c : c + n], row_corrupted[r, c : c + n] = selected[i, :n], corrupted[i, :n]
    assert int(selected.sum()) >= len(SENTENCES)  # one per sentence at least
    return (lambda: model.masked_loss(tokens, backbone.padded_sentences(lengths, tokens.shape[1]), selected, corrupted),
            lambda: model.masked_loss(rows, sentences, row_selected, row_corrupted))


def loss_pair(kind, model, device, **options):
    """(padded loss, packed loss) callables of `model` on SENTENCES."""
    if kind == "mlm":
        return mlm_loss_pair(model, device)
    tokens, lengths = padded(SENTENCES, device)
    rows, sentences, _, _ = packed(SENTENCES, device)
    if options.pop("whole_words", False):
        words, row_words = WORD_STARTS.to(device)[tokens], WORD_STARTS.to(device)[rows]
        return (lambda: model.loss(tokens, lengths, words, **options),
                lambda: model.packed_loss(rows, sentences, row_words, **options))
    return lambda: model.loss(tokens, lengths, **options), lambda: model.packed_loss(rows, sentences, **options)


def differences(kind, device, **options):
    """(relative loss difference, largest relative gradient difference of a parameter, counts) of padded and
    packed SENTENCES, in float64."""
    model = model_of(kind, device)
    pad_loss, row_loss = loss_pair(kind, model, device, **options)
    (a, n_a, grads_a), (b, n_b, grads_b) = loss_and_grads(model, pad_loss), loss_and_grads(model, row_loss)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) == len(list(model.parameters()))
    gap = max(float((grads_a[k] - grads_b[k]).abs().max() / grads_a[k].abs().max()) for k in grads_a)
    return float((a - b).abs() / a.abs()), gap, (n_a, n_b)


def equal(loss_gap, grad_gap) -> bool:
    """Equal within float32's precision: in float64 the padded batch alone, given 5 more columns of padding,
    moves by up to 7e-9 relative (the kernels' blocking follows the row length), so bit equality is not the test."""
    return loss_gap < 1e-6 and grad_gap < 1e-6


CASES = [(kind, {}) for kind in KINDS] + [
    ("slm", {"whole_words": True}), ("bilm", {"whole_words": True}), ("tta", {"whole_words": True}),
    ("slm", {"content_weight": 0.5})]


@pytest.mark.parametrize("kind, options", CASES, ids=[f"{k}{'-' + '-'.join(o) if o else ''}" for k, o in CASES])
def test_packed_loss_and_gradients_equal_the_padded_ones(kind, options, device):
    rows, sentences, _, predicted = packed(SENTENCES, device)
    assert rows.shape[1] == ROW and rows.shape[0] < len(SENTENCES)  # several sentences share a row
    loss_gap, grad_gap, (n_padded, n_packed) = differences(kind, device, **options)
    assert int(n_padded) == int(n_packed)
    if kind != "mlm":
        assert int(n_packed) == predicted == sum(len(s) + 1 for s in SENTENCES)
    assert equal(loss_gap, grad_gap), (loss_gap, grad_gap)


@pytest.mark.parametrize("kind", KINDS)
def test_a_mask_that_lets_one_sentence_see_another_is_caught(kind, device, monkeypatch):
    """The comparison above fails for every kind when attention may cross sentences (every key of the row
    counted as the query's sentence): the gradients differ by far more than the tolerance."""
    pairs = backbone._pairs

    def leaky(sentences):
        same, *order = pairs(sentences)
        return (same | (sentences != backbone.PADDING)[:, None, :], *order)

    monkeypatch.setattr(backbone, "_pairs", leaky)
    loss_gap, grad_gap, _ = differences(kind, device)
    assert not equal(loss_gap, grad_gap) and grad_gap > 1e-3, (loss_gap, grad_gap)


def test_every_sentence_once_per_epoch_whole_in_rows_of_one_shape():
    rng = np.random.default_rng(0)
    sentences = [rng.integers(2, 11, size=rng.integers(0, 40)) for _ in range(500)]
    lengths = [min(len(s), 30) + 2 for s in sentences]
    rows = pack_rows(lengths, 32, random.Random(3))
    assert sorted(i for row in rows for i in row) == list(range(500))
    assert all(sum(lengths[i] for i in row) <= 32 for row in rows)
    assert pack_rows(lengths, 32, random.Random(3)) == rows != pack_rows(lengths, 32, random.Random(4))
    epoch = PackedRows(Sentences(sentences), rows, 32, 8, EOS)
    assert epoch.tokens.shape == epoch.sentences.shape == (len(epoch), 8, 32) and len(epoch) == -(-len(rows) // 8)
    assert sum(lengths) / (len(rows) * 32) > 0.9  # rows are nearly full
    found = []
    for tokens, numbers in zip(epoch.tokens.reshape(-1, 32).tolist(), epoch.sentences.reshape(-1, 32).tolist()):
        assert numbers == sorted(numbers, key=lambda n: (n == backbone.PADDING, n))  # padding only at the end
        for n in sorted(set(numbers) - {backbone.PADDING}):
            row = [t for t, m in zip(tokens, numbers) if m == n]
            assert row[0] == row[-1] == EOS and EOS not in row[1:-1]
            found.append(tuple(row[1:-1]))
    assert sorted(found) == sorted(tuple(s[:30]) for s in sentences)  # each once, whole (cut to the row only)
    assert sum(epoch.predicted) == sum(lengths) - len(lengths)
    positions = backbone.sentence_positions(epoch.sentences[0].long())
    starts = (positions == 0) & (epoch.sentences[0] != backbone.PADDING)
    assert torch.all(epoch.tokens[0][starts] == EOS)  # every sentence's position 0 is its <s>
