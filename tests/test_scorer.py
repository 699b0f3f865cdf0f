"""Scorer: batching, order, determinism, save/load, bad input, and the slm-score CLI."""
import math

import pytest
import torch

from slm_lm import build_lm
from slm_lm.bin import score as score_cli
from slm_lm.common.errors import InputError
from slm_lm.model.bpe import train_bpe
from slm_lm.scoring.scorer import Scorer, load_scorer

TEXT = """IN THE BEGINNING GOD CREATED THE HEAVEN AND THE EARTH
AND THE EARTH WAS WITHOUT FORM AND VOID AND DARKNESS WAS UPON THE FACE OF THE DEEP
AND THE SPIRIT OF GOD MOVED UPON THE FACE OF THE WATERS
AND GOD SAID LET THERE BE LIGHT AND THERE WAS LIGHT
AND GOD SAW THE LIGHT THAT IT WAS GOOD AND GOD DIVIDED THE LIGHT FROM THE DARKNESS
IT'S A QUICK BROWN FOX JUMPING OVER THE LAZY DOG
"""


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    (d / "text.txt").write_text(TEXT * 20)
    return train_bpe(d / "text.txt", d / "bpe", vocab_size=60)


def make_scorer(tokenizer, kind="slm", **options):
    torch.manual_seed(0)
    model = build_lm(kind, tokenizer.vocab_size, size="tiny", max_positions=64)
    return Scorer(model, tokenizer, **options)


SENTENCES = ["and god saw the light", "", "In the beginning, God created the heaven and the earth!",
             "the deep", "AND THE SPIRIT OF GOD MOVED UPON THE FACE OF THE WATERS"]


@pytest.mark.parametrize("kind", ["slm", "clm", "mlm", "bilm", "tta"])
def test_scores_keep_input_order_and_do_not_depend_on_batching(tokenizer, kind, device):
    big = make_scorer(tokenizer, kind, device=device)
    small = make_scorer(tokenizer, kind, max_tokens=20, device=device)  # forces one sentence per batch
    a, b = big.score(SENTENCES), small.score(SENTENCES)
    assert all(math.isfinite(x) and x < 0 for x in a)
    assert a == pytest.approx(b, abs=1e-4)
    alone = [big.score([s])[0] for s in SENTENCES]
    assert a == pytest.approx(alone, abs=1e-4)
    assert big.score(SENTENCES) == a  # deterministic in eval mode


def test_token_scores_sum_to_sentence_score_and_end_with_eos(tokenizer):
    scorer = make_scorer(tokenizer)
    rows = scorer.token_scores(SENTENCES[:2])
    for row, total in zip(rows, scorer.score(SENTENCES[:2])):
        assert row[-1][0] == "</s>"
        assert sum(lp for _, lp in row) == pytest.approx(total, abs=1e-4)
    assert len(rows[1]) == 1  # the empty sentence is scored as log P(</s> | <s>)
    assert "".join(p for p, _ in rows[0][:-1]).replace("▁", " ").strip() == "AND GOD SAW THE LIGHT"


def test_save_load_round_trip_gives_identical_scores(tokenizer, tmp_path):
    for kind in ("slm", "mlm"):
        scorer = make_scorer(tokenizer, kind)
        if kind == "mlm":
            scorer.model.k = 2
        scorer.save_pretrained(tmp_path / kind)
        loaded = load_scorer(str(tmp_path / kind))
        assert loaded.score(SENTENCES) == scorer.score(SENTENCES)
        assert loaded.name == scorer.name
    assert load_scorer(str(tmp_path / "slm")).name != load_scorer(str(tmp_path / "mlm")).name
    assert Scorer.from_pretrained(tmp_path / "mlm").model.k == 2
    assert Scorer.from_pretrained(tmp_path / "mlm", mlm_k="n/3").model.k == "n/3"
    with pytest.raises(ValueError, match="masked LMs only"):
        Scorer.from_pretrained(tmp_path / "slm", mlm_k=3)


def test_bad_input_raises_clear_errors(tokenizer, tmp_path):
    scorer = make_scorer(tokenizer, normalize=False)
    with pytest.raises(InputError, match="sentence 1: unknown character") as e:
        scorer.score(["THE DEEP", "THE DEEP Ωmega"])
    assert e.value.index == 1
    assert math.isfinite(make_scorer(tokenizer, normalize=False, unknown="unk").score(["THE DEEP Ωmega"])[0])
    long = " ".join(["THE EARTH"] * 60)
    with pytest.raises(InputError, match="sentence 0: .* exceed the model's limit of 62"):
        scorer.score([long])
    truncated = make_scorer(tokenizer, truncate=True)
    assert len(truncated.token_scores([long])[0]) == 63  # 62 pieces + </s>
    with pytest.raises(InputError, match="expected a string"):
        scorer.score([None])
    with pytest.raises(InputError, match="model directory not found"):
        Scorer.from_pretrained(tmp_path / "nope")
    (tmp_path / "half").mkdir()
    with pytest.raises(InputError, match="missing config.json"):
        Scorer.from_pretrained(tmp_path / "half")


def test_cli_writes_tsv_and_reports_the_bad_line(tokenizer, tmp_path, capsys):
    scorer = make_scorer(tokenizer)
    scorer.save_pretrained(tmp_path / "model")
    (tmp_path / "in.txt").write_text("and god saw the light\n\nthe deep\n")
    score_cli.main(["--model", str(tmp_path / "model"), "--input", str(tmp_path / "in.txt"),
                    "--output", str(tmp_path / "out.tsv"), "--tokens"])
    rows = [line.split("\t") for line in (tmp_path / "out.tsv").read_text().splitlines()]
    assert [r[0] for r in rows] == ["1", "2", "3"]
    expected = scorer.score(["and god saw the light", "", "the deep"])
    assert [float(r[1]) for r in rows] == pytest.approx(expected, abs=1e-3)
    assert rows[1][2] == "1" and rows[1][3].startswith("</s>:")
    (tmp_path / "bad.txt").write_text("THE DEEP\nTHE DEEP Ωmega\n")
    with pytest.raises(SystemExit, match=r"bad.txt:2: sentence 1: unknown character"):
        score_cli.main(["--model", str(tmp_path / "model"), "--input", str(tmp_path / "bad.txt"), "--no-normalize"])


@pytest.mark.parametrize("kind", ["slm", "clm", "mlm", "bilm"])
def test_bfloat16_scores_are_close_to_float32(tokenizer, kind, device):
    """Measured on CPU on these sentences (4 to 132 nats): at most 0.007 nats apart; bf16 really ran (not equal)."""
    full = make_scorer(tokenizer, kind, device=device).score(SENTENCES)
    half = make_scorer(tokenizer, kind, dtype="bfloat16", device=device).score(SENTENCES)
    assert all(math.isfinite(x) for x in half) and half != full
    assert half == pytest.approx(full, rel=0, abs=0.05)


def test_word_starts_follow_the_pieces(tokenizer):
    """'▁' pieces and the special tokens begin words; the other pieces continue one."""
    starts = tokenizer.word_start_ids()
    for word in ("BEGINNING", "QUICK", "IT'S"):
        ids = tokenizer.encode(word)
        assert [starts[i] for i in ids] == [True] + [False] * (len(ids) - 1), tokenizer.pieces(word)
    assert len(tokenizer.encode("BEGINNING")) > 1  # the test needs a word of several pieces
    assert all(starts[i] for i in (tokenizer.pad_id, tokenizer.unk_id, tokenizer.mask_id, tokenizer.eos_id))


def test_whole_words_change_scores_and_cache_key_but_not_for_a_clm(tokenizer, tmp_path, capsys):
    """Whole words score the SLM differently and under another cache name; a CLM's scores stay; a model
    saved with whole_words in its scorer section loads with it; slm-score --whole-words passes it on."""
    for kind in ("slm", "clm"):
        pieces, words = make_scorer(tokenizer, kind), make_scorer(tokenizer, kind, whole_words=True)
        assert pieces.name != words.name
        same = pieces.score(SENTENCES) == pytest.approx(words.score(SENTENCES), abs=1e-5)
        assert same == (kind == "clm"), kind
    saved = make_scorer(tokenizer, "slm")
    saved.save_pretrained(tmp_path / "m")
    config = (tmp_path / "m" / "config.json")
    config.write_text(config.read_text().replace('"normalize": true', '"normalize": true, "whole_words": true'))
    assert Scorer.from_pretrained(tmp_path / "m").score(SENTENCES) == make_scorer(
        tokenizer, "slm", whole_words=True).score(SENTENCES)
    assert Scorer.from_pretrained(tmp_path / "m", whole_words=False).score(SENTENCES) == saved.score(SENTENCES)
    saved.save_pretrained(tmp_path / "plain")
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES[:2]) + "\n")
    for flag, scorer in (([], saved), (["--whole-words"], make_scorer(tokenizer, "slm", whole_words=True))):
        out = tmp_path / f"out{len(flag)}.tsv"
        score_cli.main(["--model", str(tmp_path / "plain"), "--input", str(tmp_path / "in.txt"),
                        "--output", str(out), *flag])
        got = [float(line.split("\t")[1]) for line in out.read_text().splitlines()]
        assert got == pytest.approx(scorer.score(SENTENCES[:2]), abs=1e-4)


def test_the_cache_key_covers_every_config_field_not_a_chosen_few(tokenizer, tmp_path):
    """Issue 32: a copy with another n_heads, layer_norm_eps or mask_id scores differently, so it gets another
    cache key; an untouched copy elsewhere (or one with config.json's keys reordered) keeps the key."""
    import json
    import shutil

    make_scorer(tokenizer, "slm").save_pretrained(tmp_path / "m")
    original = load_scorer(str(tmp_path / "m"))
    shutil.copytree(tmp_path / "m", tmp_path / "copy")
    path = tmp_path / "copy" / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps(dict(reversed(list(config.items())))))
    assert load_scorer(str(tmp_path / "copy")).name == original.name
    for key, value in (("n_heads", 2), ("layer_norm_eps", 1e-5), ("mask_id", tokenizer.vocab_size - 3)):
        edited = shutil.copytree(tmp_path / "m", tmp_path / key)
        changed = json.loads((edited / "config.json").read_text())
        changed["model"][key] = value
        (edited / "config.json").write_text(json.dumps(changed))
        scorer = load_scorer(str(edited))
        assert scorer.name != original.name, key
        if key != "mask_id":  # the SLM masks its queries: mask_id changes what it sees
            assert scorer.score(SENTENCES) != pytest.approx(original.score(SENTENCES), abs=1e-6), key
