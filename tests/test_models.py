"""Model contract: no leakage, causal CLM, SLM and T-TA against slow references, padding invariance, PLL.

Tests that take the `device` fixture run on `pytest --device cuda` too (tests/conftest.py).
"""
import math

import pytest
import torch

from slm_lm import build_lm
from slm_lm.model.backbone import padded_sentences
from slm_lm.model.config import LMConfig

V = 13  # tiny vocabulary: 0 pad, 1 unk, 2..10 pieces, 11 <mask>, 12 <sos/eos>
EOS = V - 1


def make_model(kind, device="cpu", **kw):
    torch.manual_seed(0)
    model = build_lm(kind, V, size="tiny", max_positions=32, dropout=0.0, **kw)
    return model.double().eval().to(device)


def batch(*sentences, device="cpu"):
    """Pad `<s> x </s>` rows; returns tokens [B,T], lengths [B]."""
    rows = [[EOS, *s, EOS] for s in sentences]
    lengths = torch.tensor([len(r) for r in rows])
    tokens = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = torch.tensor(r)
    return tokens.to(device), lengths.to(device)


SENTENCES = ([3, 4, 5, 6, 7, 8], [9, 2, 5])


@pytest.mark.parametrize("kind", ["slm", "mlm", "bilm", "tta"])
def test_bidirectional_kinds_do_not_see_the_scored_token(kind, device):
    """Substituting every symbol v at position i gives P(v | context) summing to 1: x_i is never seen.

    A model that leaks x_i into its prediction at i does not sum to 1. Checked at every position of a
    padded batch, and the score at i must move when a neighbour changes.
    """
    model = make_model(kind, device)
    tokens, lengths = batch(*SENTENCES, device=device)
    for row in range(len(tokens)):
        for i in range(1, int(lengths[row])):
            copies = tokens[row].repeat(V, 1)
            copies[:, i] = torch.arange(V, device=device)
            rows = torch.cat([copies, tokens])  # keep the padded batch around the copies
            lens = torch.cat([lengths[row].repeat(V), lengths])
            with torch.no_grad():
                lp = model.token_logprobs(rows, lens)[:V, i]
            assert torch.isfinite(lp).all()
            assert math.isclose(float(lp.exp().sum()), 1.0, abs_tol=1e-9), (kind, row, i)
            for j in (i - 1, i + 1):
                if 1 <= j < int(lengths[row]) - 1:
                    changed = tokens[row : row + 1].clone()
                    changed[0, j] = 2 if changed[0, j] != 2 else 3
                    with torch.no_grad():
                        before = model.token_logprobs(tokens[row : row + 1], lengths[row : row + 1])[0, i]
                        after = model.token_logprobs(changed, lengths[row : row + 1])[0, i]
                    assert abs(float(before - after)) > 1e-6, (kind, row, i, j)


def test_clm_ignores_the_future(device):
    model = make_model("clm", device)
    tokens, lengths = batch(*SENTENCES, device=device)
    with torch.no_grad():
        base = model.token_logprobs(tokens, lengths)
        for j in range(1, int(lengths[0]) - 1):
            changed = tokens.clone()
            changed[0, j] = 2 if changed[0, j] != 2 else 3
            new = model.token_logprobs(changed, lengths)
            assert torch.equal(new[0, :j], base[0, :j])
            assert not torch.equal(new[0, j + 1], base[0, j + 1])


def naive_attention(q, k, v, allowed):
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v


def slow_slm_reference(model, sentence, right_of=None):
    """Position by position: forward stream on the prefix, backward on the suffix, query on both.
    `right_of(i)`: where the suffix starts (default i + 1; whole words: the next word's start)."""
    tokens, _ = batch(sentence, device=next(model.parameters()).device)
    t = tokens.shape[1]
    positions = torch.arange(t, device=tokens.device)[None]
    x = model.embed(tokens, positions)
    q0 = model.embed.query_stream(model.config.mask_id, positions)
    out = []
    for i in range(1, t):
        f, b, q = x[:, :i], x[:, (right_of(i) if right_of else i + 1) :], q0[:, i : i + 1]
        for layer in model.layers:
            heads = layer._heads
            # forward stream on the prefix (causal), backward stream on the suffix (anti-causal)
            fq, fk, fv = layer.project(f)
            causal = torch.ones(i, i, dtype=torch.bool, device=tokens.device).tril()
            f_next = layer.finish(f, naive_attention(fq, fk, fv, causal).transpose(1, 2).flatten(2))
            if b.shape[1]:
                bq, bk, bv = layer.project(b)
                anti = torch.ones(b.shape[1], b.shape[1], dtype=torch.bool, device=tokens.device).triu()
                b_next = layer.finish(b, naive_attention(bq, bk, bv, anti).transpose(1, 2).flatten(2))
                keys, values = torch.cat([fk, bk], 2), torch.cat([fv, bv], 2)
            else:
                b_next, keys, values = b, fk, fv
            qq = heads(torch.nn.functional.linear(q, layer.qkv.weight[: layer.d_model], layer.qkv.bias[: layer.d_model]))
            allowed = torch.ones(1, keys.shape[2], dtype=torch.bool, device=tokens.device)
            q = layer.finish(q, naive_attention(qq, keys, values, allowed).transpose(1, 2).flatten(2))
            f, b = f_next, b_next
        logits = model.head(q[0, 0])
        out.append(torch.log_softmax(logits, -1)[tokens[0, i]])
    return torch.stack(out)


def test_slm_matches_slow_reference(device):
    model = make_model("slm", device)
    for sentence in SENTENCES:
        tokens, lengths = batch(*SENTENCES, device=device)
        row = SENTENCES.index(sentence)
        with torch.no_grad():
            fast = model.token_logprobs(tokens, lengths)[row, 1 : int(lengths[row])]
            slow = slow_slm_reference(model, sentence)
        assert torch.allclose(fast, slow, atol=1e-5), (fast, slow)


@pytest.mark.parametrize("kind", ["slm", "clm", "mlm", "bilm", "tta"])
def test_alone_equals_inside_padded_batch(kind, device):
    torch.manual_seed(0)
    model = build_lm(kind, V, size="tiny", max_positions=32).eval().to(device)  # float32, dropout inactive in eval
    short = [4, 5, 6]
    alone_t, alone_l = batch(short, device=device)
    mixed_t, mixed_l = batch([3, 4, 5, 6, 7, 8, 9, 2, 3], short, [2] * 12, device=device)
    with torch.no_grad():
        alone = model.token_logprobs(alone_t, alone_l)[0]
        mixed = model.token_logprobs(mixed_t, mixed_l)[1]
    assert torch.allclose(alone, mixed[: alone_t.shape[1]], atol=1e-5)
    assert torch.all(mixed[alone_t.shape[1] :] == 0)
    assert alone[0] == 0 and torch.all(alone[1:] < 0)


def slow_tta_reference(model, sentence):
    """Position by position: the query of i attends the input embeddings of every j != i at every layer."""
    tokens, _ = batch(sentence, device=next(model.parameters()).device)
    t = tokens.shape[1]
    positions = torch.arange(t, device=tokens.device)[None]
    x = model.embed(tokens, positions)
    q0 = model.embed.query_stream(model.config.mask_id, positions)
    out = []
    for i in range(1, t):
        others = torch.cat([x[:, :i], x[:, i + 1 :]], dim=1)  # the sentence without x_i
        q = q0[:, i : i + 1]
        for layer in model.layers:
            _, k, v = layer.project(others)
            qq = layer.project(q)[0]
            allowed = torch.ones(1, t - 1, dtype=torch.bool, device=tokens.device)
            q = layer.finish(q, naive_attention(qq, k, v, allowed).transpose(1, 2).flatten(2))
        out.append(torch.log_softmax(model.head(q[0, 0]), -1)[tokens[0, i]])
    return torch.stack(out)


def test_tta_matches_slow_reference(device):
    """The fused T-TA (one SDPA call per layer, diagonal and padding masked) equals attending, for each
    position alone, the input embeddings of the rest of the sentence; inside a padded batch."""
    model = make_model("tta", device)
    tokens, lengths = batch(*SENTENCES, device=device)
    with torch.no_grad():
        fast = model.token_logprobs(tokens, lengths)
        for row, sentence in enumerate(SENTENCES):
            slow = slow_tta_reference(model, sentence)
            assert torch.allclose(fast[row, 1 : int(lengths[row])], slow, atol=1e-10), (fast[row], slow)


def test_tta_keys_and_values_are_the_inputs_at_every_layer():
    """A change of x_j reaches the prediction at i != j through the keys of every layer, not only the
    first: with layer 0's attention cut off from the tokens, x_j still moves the score at i."""
    model = make_model("tta")
    tokens, lengths = batch(SENTENCES[0])
    changed = tokens.clone()
    changed[0, 2] = 9
    w = model.layers[0].qkv.weight
    with torch.no_grad():
        w[model.config.d_model :] = 0  # layer 0: zero keys and values, so its output ignores the tokens
        base, new = model.token_logprobs(tokens, lengths), model.token_logprobs(changed, lengths)
    assert abs(float(base[0, 4] - new[0, 4])) > 1e-6


def test_one_layer_slm_equals_one_layer_tta_and_deeper_ones_differ(device):
    """With one layer, the SLM's query stream attends the input embeddings of x_<i (forward half) and
    x_>i (backward half): exactly T-TA's keys. Same weights give the same scores, in a padded batch.
    From two layers on, the SLM attends contextual content states and T-TA the inputs again."""
    tokens, lengths = batch(*SENTENCES, device=device)
    for layers, same in ((1, True), (2, False)):
        slm, tta = make_model("slm", device, n_layers=layers), make_model("tta", device, n_layers=layers)
        tta.load_state_dict(slm.state_dict())
        with torch.no_grad():
            a, b = slm.token_logprobs(tokens, lengths), tta.token_logprobs(tokens, lengths)
        assert torch.allclose(a, b, atol=1e-12) == same, (layers, float((a - b).abs().max()))


# Words of SENTENCES (True where a word begins): <s> | 3 4 | 5 | 6 7 8 | </s>  and  <s> | 9 2 5 | </s>
WORD_STARTS = ([1, 1, 0, 1, 1, 0, 0, 1], [1, 1, 0, 0, 1])


def word_starts_of(tokens, device="cpu"):
    """[B, T] bool from WORD_STARTS, padding marked as word starts."""
    starts = torch.ones(tokens.shape, dtype=torch.bool)
    for row, marks in enumerate(WORD_STARTS):
        starts[row, : len(marks)] = torch.tensor(marks, dtype=torch.bool)
    return starts.to(device)


def rest_of_word_positions(row, i):
    """Positions after i in i's word, and the first position of the next word."""
    marks = WORD_STARTS[row]
    nxt = next((j for j in range(i + 1, len(marks)) if marks[j]), len(marks))
    return list(range(i + 1, nxt)), nxt


@pytest.mark.parametrize("kind", ["slm", "mlm", "bilm", "tta"])
def test_whole_words_hide_the_rest_of_the_word_only(kind, device):
    """With word starts, the score at i sums to 1 over x_i (x_i unseen), does not move when a later piece
    of its own word changes, and moves when the previous piece or the next word's first piece changes."""
    model = make_model(kind, device)
    tokens, lengths = batch(*SENTENCES, device=device)
    words = word_starts_of(tokens, device)

    def score(rows, at):
        with torch.no_grad():
            return model.token_logprobs(rows, lengths[row].repeat(len(rows)), words[row].repeat(len(rows), 1))[:, at]

    for row in range(len(tokens)):
        n = int(lengths[row])
        for i in range(1, n):
            copies = tokens[row].repeat(V, 1)
            copies[:, i] = torch.arange(V, device=device)
            assert math.isclose(float(score(copies, i).exp().sum()), 1.0, abs_tol=1e-9), (kind, row, i)
            rest, nxt = rest_of_word_positions(row, i)
            for j, moves in [(j, False) for j in rest] + [(i - 1, True), (nxt, True)]:
                if not 1 <= j < n - 1:
                    continue
                changed = tokens[row : row + 1].clone()
                changed[0, j] = 2 if changed[0, j] != 2 else 3
                before, after = score(tokens[row : row + 1], i), score(changed, i)
                assert (abs(float(before - after)) > 1e-6) == moves, (kind, row, i, j)


@pytest.mark.parametrize("kind", ["slm", "clm", "mlm", "bilm", "tta"])
def test_whole_words_of_one_piece_each_score_as_pieces(kind, device):
    """When every piece is a word, whole-word scoring is piece scoring; for a CLM it always is."""
    model = make_model(kind, device)
    tokens, lengths = batch(*SENTENCES, device=device)
    with torch.no_grad():
        pieces = model.token_logprobs(tokens, lengths)
        single = model.token_logprobs(tokens, lengths, torch.ones_like(tokens, dtype=torch.bool))
        words = model.token_logprobs(tokens, lengths, word_starts_of(tokens, device))
    assert torch.allclose(pieces, single, atol=1e-12)
    assert torch.allclose(pieces, words, atol=1e-12) == (kind == "clm")


def test_slm_whole_words_match_slow_reference(device):
    """The fused SLM with word starts equals the slow reference whose backward stream starts at the next
    word: every position, inside a padded batch."""
    model = make_model("slm", device)
    tokens, lengths = batch(*SENTENCES, device=device)
    with torch.no_grad():
        fast = model.token_logprobs(tokens, lengths, word_starts_of(tokens, device))
        for row, sentence in enumerate(SENTENCES):
            slow = slow_slm_reference(model, sentence, right_of=lambda i: rest_of_word_positions(row, i)[1])
            assert torch.allclose(fast[row, 1 : int(lengths[row])], slow, atol=1e-10), (fast[row], slow)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # CPU: eager
def test_slm_flex_attention_scores_equal_sdpa(device):
    """FlexAttention's block masks give the SDPA scores, pieces and whole words, inside a padded batch."""
    torch.manual_seed(0)
    model = build_lm("slm", V, size="tiny", max_positions=32).eval().to(device)
    tokens, lengths = batch(*SENTENCES, [3, 4, 5, 6, 7, 8, 9, 2, 3], [2] * 12, device=device)
    for words in (None, word_starts_of(tokens, device)):
        with torch.no_grad():
            sdpa = model.token_logprobs(tokens, lengths, words)
            model.attention = "flex"
            flex = model.token_logprobs(tokens, lengths, words)
            model.attention = "sdpa"
        assert torch.allclose(flex, sdpa, atol=1e-5), (flex - sdpa).abs().max()
    assert not torch.allclose(sdpa, model.token_logprobs(tokens, lengths), atol=1e-5)  # the words mattered


def test_mlm_whole_words_equal_explicit_word_l2r_masking(device):
    """PLL-word-l2r (Kauf & Ivanova, 2023): x_i and the later pieces of its word are masked together."""
    model = make_model("mlm", device)
    tokens, lengths = batch(*SENTENCES, device=device)
    with torch.no_grad():
        pll = model.token_logprobs(tokens, lengths, word_starts_of(tokens, device))
        for row in range(len(tokens)):
            n = int(lengths[row])
            for i in range(1, n):
                copy = tokens[row : row + 1, :n].clone()
                copy[0, [i, *rest_of_word_positions(row, i)[0]]] = model.config.mask_id
                h = model.encode(copy, padded_sentences(lengths[row : row + 1], n))
                expected = torch.log_softmax(model.head(h[0, i]), -1)[tokens[row, i]]
                assert torch.allclose(pll[row, i], expected, atol=1e-10)


def test_mlm_pll_equals_explicit_single_mask_passes(device):
    model = make_model("mlm", device)
    tokens, lengths = batch(*SENTENCES, device=device)
    with torch.no_grad():
        pll = model.token_logprobs(tokens, lengths)
        for row in range(len(tokens)):
            n = int(lengths[row])
            for i in range(1, n):
                copy = tokens[row : row + 1, :n].clone()
                copy[0, i] = model.config.mask_id
                h = model.encode(copy, padded_sentences(lengths[row : row + 1], n))
                expected = torch.log_softmax(model.head(h[0, i]), -1)[tokens[row, i]]
                assert torch.allclose(pll[row, i], expected, atol=1e-10)


@pytest.mark.parametrize("k, passes", [(2, 4), (3, 3), ("n/3", 3), ("n/2", 2), (1, 7)])
def test_mlm_k_scores_each_position_once(k, passes):
    model = make_model("mlm")
    model.k = k
    groups = model.groups(7)
    assert len(groups) == passes
    assert sorted(torch.cat(groups).tolist()) == list(range(1, 8))
    tokens, lengths = batch(SENTENCES[0])  # 6 pieces + </s> = 7 scored positions
    calls = []
    hook = model.layers[0].register_forward_hook(lambda m, i, o: calls.append(o.shape[0]))
    with torch.no_grad():
        lp = model.token_logprobs(tokens, lengths)
    hook.remove()
    assert sum(calls) == passes
    assert torch.all(lp[0, 1:] < 0) and lp[0, 0] == 0


def test_mlm_chunks_copies_under_memory_budget():
    model = make_model("mlm")
    tokens, lengths = batch(*SENTENCES)
    with torch.no_grad():
        expected = model.token_logprobs(tokens, lengths)
        model.max_tokens = 2 * tokens.shape[1]  # two copies per pass
        sizes = []
        hook = model.layers[0].register_forward_hook(lambda m, i, o: sizes.append(o.shape[0]))
        chunked = model.token_logprobs(tokens, lengths)
        hook.remove()
    assert max(sizes) == 2 and sum(sizes) == int((lengths - 1).sum())
    assert torch.allclose(expected, chunked, atol=1e-12)


@pytest.mark.parametrize("kind", ["slm", "clm", "bilm", "tta"])
def test_loss_is_negative_sum_of_token_logprobs(kind, device):
    model = make_model(kind, device)
    tokens, lengths = batch(*SENTENCES, device=device)
    loss, n = model.loss(tokens, lengths)
    assert n == int((lengths - 1).sum())
    assert torch.allclose(loss, -model.token_logprobs(tokens, lengths).sum())
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_slm_content_loss_adds_neighbour_prediction_by_the_content_streams(device):
    """loss(w) - loss(0) = w * (forward state at i-1 predicting x_i + backward state at i+1 predicting x_i).

    The reference runs each row alone and reads the content streams one position at a time; the
    forward state used for x_i must not change when x_i (or anything after it) changes.
    """
    model = make_model("slm", device)
    tokens, lengths = batch(*SENTENCES, device=device)
    plain, n = model.loss(tokens, lengths)
    with_content, n_content = model.loss(tokens, lengths, content_weight=0.5)
    assert n_content == n
    expected = 0.0
    for row, length in enumerate(lengths.tolist()):
        x, lens = tokens[row : row + 1, :length], lengths[row : row + 1]
        content, _ = model._streams(x, padded_sentences(lens, length))
        for i in range(1, length):
            expected -= torch.log_softmax(model.head(content[0, i - 1]), -1)[x[0, i]]
            if i < length - 1:
                expected -= torch.log_softmax(model.head(content[1, i + 1]), -1)[x[0, i]]
            changed = x.clone()
            changed[0, i:-1] = 2 + (changed[0, i:-1] - 1) % (V - 4)
            streams = model._streams(changed, padded_sentences(lens, length))
            assert torch.allclose(streams[0][0, i - 1], content[0, i - 1])
    assert torch.allclose(with_content - plain, 0.5 * expected)


def test_slm_content_loss_on_a_sample_of_positions_is_unbiased():
    model = make_model("slm")
    tokens, lengths = batch(*SENTENCES)
    torch.manual_seed(0)
    with torch.no_grad():
        plain = model.loss(tokens, lengths)[0]
        full = model.loss(tokens, lengths, content_weight=1.0)[0] - plain
        sampled = [model.loss(tokens, lengths, content_weight=1.0, content_sample=0.3)[0] - plain for _ in range(400)]
    assert len({round(float(s), 6) for s in sampled}) > 10  # a different sample each call
    assert float(torch.stack(sampled).mean()) == pytest.approx(float(full), rel=0.05)


def test_mlm_loss_masks_about_fifteen_percent():
    torch.manual_seed(1)
    model = build_lm("mlm", V, size="tiny", max_positions=128)
    tokens = torch.randint(2, V - 2, (8, 100))
    tokens[:, 0] = tokens[:, -1] = EOS
    loss, n = model.loss(tokens, torch.full((8,), 100))
    assert 0.10 * 8 * 99 < n < 0.20 * 8 * 99
    assert torch.isfinite(loss)


def test_bad_batches_and_configs_are_rejected():
    model = make_model("slm")
    with pytest.raises(ValueError, match="length"):
        model.token_logprobs(torch.tensor([[EOS]]), torch.tensor([1]))
    with pytest.raises(ValueError, match="max_positions"):
        model.token_logprobs(torch.full((1, 40), 3), torch.tensor([40]))
    with pytest.raises(ValueError, match="kind"):
        build_lm("gpt", V)
    with pytest.raises(ValueError, match="size"):
        build_lm("slm", V, size="huge")
    with pytest.raises(ValueError, match="divisible"):
        build_lm("slm", V, size="tiny", n_heads=3)
    assert LMConfig.from_dict(model.config.to_dict()) == model.config


def test_named_sizes_have_the_paper_parameter_counts():
    """base ~110M and small ~34M with a BERT-sized vocabulary (the paper's Transcormer sizes)."""
    base = sum(p.numel() for p in build_lm("slm", 30522, "base").parameters())
    small = sum(p.numel() for p in build_lm("slm", 30522, "small").parameters())
    assert 105e6 < base < 115e6 and 30e6 < small < 38e6
