"""The shipped pretrained models (slm_lm/pretrained): present, small, fp16, loadable by name from every
entry point, and still measuring what their model cards say."""
import json
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open

from slm_lm import pretrained
from slm_lm.common.errors import InputError
from slm_lm.scoring.scorer import Scorer

SHIPPED = ("slm-books", "clm-books")


def test_the_books_models_are_shipped_small_and_fp16():
    assert set(SHIPPED) <= set(pretrained.names())
    for name in SHIPPED:
        root = pretrained.path(name)
        for file in ("model.safetensors", "config.json", "bpe.model", "tokens.txt", "card.json", "README.md"):
            assert (root / file).is_file(), (name, file)
        assert (root / "model.safetensors").stat().st_size <= 10 * 2**20
        with safe_open(str(root / "model.safetensors"), "pt") as f:
            assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
        card = json.loads((root / "card.json").read_text())
        assert card["training"]["kind"] == name.split("-")[0]
        assert f"{card['blimp']['overall']:.1f} %" in (root / "README.md").read_text()
    assert not list(pretrained.ROOT.glob("*/checkpoint.pt")), "training checkpoints are never shipped"


def test_loading_by_name_everywhere_gives_the_same_scores(tmp_path):
    sentences = ["THE CAT SAT ON THE MAT", "HE SAID THAT HE WOULD COME"]
    scorer = Scorer.from_pretrained("slm-books")
    direct = scorer.score(sentences)
    (tmp_path / "in.txt").write_text("\n".join(sentences) + "\n")
    subprocess.run([sys.executable, "-m", "slm_lm.bin.score", "--model", "slm-books", "--input",
                    str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.tsv")], check=True, cwd=tmp_path)
    rows = [line.split("\t") for line in (tmp_path / "out.tsv").read_text().splitlines()]
    assert [r[0] for r in rows] == ["1", "2"]
    assert [float(r[1]) for r in rows] == pytest.approx(direct, abs=1e-3)
    assert Scorer.from_pretrained("clm-books").score(sentences) != pytest.approx(direct, abs=1e-2)
    with pytest.raises(InputError, match=r"no-such-model: .*shipped models: clm-books, slm-books"):
        Scorer.from_pretrained("no-such-model")


@pytest.mark.parametrize("name", SHIPPED)
def test_card_check_figures_are_reproduced(name, fetched_data):
    """BLiMP (10 pairs per paradigm) and dev_clean rescoring (200 utterances, the card's lambda) give the
    card's figures again: the shipped fp16 weights are the ones the card describes."""
    from slm_lm.bin.model_card import check_figures

    card = json.loads((pretrained.path(name) / "card.json").read_text())["check"]
    got = check_figures(name, card["lambda"], fetched_data)
    assert got["blimp_pairs"] == card["blimp_pairs"] and got["dev_clean_utts"] == card["dev_clean_utts"]
    assert got["blimp_accuracy"] == pytest.approx(card["blimp_accuracy"], abs=0.2)  # percent
    assert got["wer_am"] == pytest.approx(card["wer_am"], abs=1e-6)
    assert got["wer_rescored"] == pytest.approx(card["wer_rescored"], abs=0.05)
    assert got["mean_lm_score"] == pytest.approx(card["mean_lm_score"], abs=0.05)


def test_card_of_a_continued_run_keeps_its_start():
    from slm_lm.bin.model_card import card_markdown
    card = json.loads((pretrained.ROOT / "slm-books" / "card.json").read_text())
    start = {"name": "slm-books", "machine": "an older CPU", "command": "slm-pretrain train --minutes 120 FIRST",
             "training": dict(card["training"], spent_minutes=120.0, tokens_seen=1000)}
    continued = dict(card, started_from=[start], command="slm-pretrain train --init slm-books SECOND")
    text = card_markdown("slm-books", continued)
    assert "| started from | the weights of slm-books as shipped then: 1,000 tokens" in text
    total = card["training"]["spent_minutes"] + 120.0
    assert f"| compute in all | {total:.1f} minutes of one core, {card['training']['tokens_seen'] + 1000:,} tokens" in text
    assert text.index("FIRST") < text.index("SECOND")
    assert "started from" not in card_markdown("slm-books", dict(card, started_from=[]))


def test_card_started_from_copies_the_shipped_start_and_refuses_an_unshipped_one():
    from slm_lm.bin.model_card import started_from
    card = json.loads((pretrained.ROOT / "slm-books" / "card.json").read_text())
    assert started_from({"kind": "slm"}) == []
    chain = started_from({"init": "slm-books"})
    assert chain == card["started_from"] + [{k: card[k] for k in ("name", "machine", "command", "training")}]
    with pytest.raises(InputError, match="not a shipped model"):
        started_from({"init": "exp/some/model"})


@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_configs_record_their_own_tokenizer(name):
    from slm_lm.model import directory as model_dir

    root = pretrained.path(name)
    recorded = json.loads((root / "config.json").read_text())[model_dir.TOKENIZER_DIGEST_KEY]
    assert recorded == model_dir.load_tokenizer(root).digest()
    assert model_dir.load_pretrained(root)[1].digest() == recorded
