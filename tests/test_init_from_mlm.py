"""SLM initialised from masked-LM weights: our mlm checkpoint, and tiny random BERT / RoBERTa dirs."""
import json

import pytest
import torch
import yaml
from espnet2.torch_utils.load_pretrained_model import load_pretrained_model
from test_hf import make_bert_dir, make_roberta_dir
from transformers import AutoModelForMaskedLM

from slm_lm import build_lm, pretrained
from slm_lm.bin import init_slm
from slm_lm.model.bpe import train_bpe
from slm_lm.common.errors import InputError
from slm_lm.pretrain.init_from_mlm import from_our_checkpoint, hf_to_slm_lm, slm_from_hf
from slm_lm.scoring.hf import load_hf_scorer
from slm_lm.model.directory import VOCAB_TENSORS
from slm_lm.model.kinds import MaskedLM, SlidingLM
from slm_lm.scoring.scorer import Scorer

SENTENCES = ["the cat sat on the mat.", "a dog ran!", "hello world, it is good", "the cats sat", ""]


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_init")
    return {"bert": make_bert_dir(root / "bert"), "roberta": make_roberta_dir(root / "roberta")}


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm")
    (root / "text.txt").write_text("THE CAT SAT ON THE MAT\nA DOG RAN AWAY FROM IT\nHELLO WORLD IT IS GOOD\n" * 30)
    tokenizer = train_bpe(root / "text.txt", root / "bpe", vocab_size=40)
    torch.manual_seed(0)
    Scorer(build_lm("mlm", tokenizer.vocab_size, size="tiny", max_positions=32), tokenizer).save_pretrained(root / "mlm")
    return root / "mlm"


def test_bert_tensors_are_mapped(hf_dirs):
    hf = AutoModelForMaskedLM.from_pretrained(hf_dirs["bert"], local_files_only=True)
    theirs = hf.state_dict()
    fields, ours = hf_to_slm_lm(hf.config, theirs)
    assert fields == dict(vocab_size=hf.config.vocab_size, n_layers=2, d_model=32, n_heads=4, d_ff=64,
                          max_positions=64, dropout=0.1, layer_norm_eps=1e-12)
    layer = "bert.encoder.layer.1."
    q, k, v = (theirs[f"{layer}attention.self.{p}.weight"] for p in ("query", "key", "value"))
    assert torch.equal(ours["layers.1.qkv.weight"], torch.cat([q, k, v]))
    assert torch.equal(ours["layers.1.qkv.bias"][32:64], theirs[f"{layer}attention.self.key.bias"])
    assert torch.equal(ours["layers.1.ff.0.weight"], theirs[f"{layer}intermediate.dense.weight"])
    assert torch.equal(ours["layers.1.ff_norm.bias"], theirs[f"{layer}output.LayerNorm.bias"])
    assert torch.equal(ours["layers.0.attn_norm.weight"], theirs["bert.encoder.layer.0.attention.output.LayerNorm.weight"])
    folded = theirs["bert.embeddings.position_embeddings.weight"] + theirs["bert.embeddings.token_type_embeddings.weight"][0]
    assert torch.equal(ours["embed.positions.weight"], folded)
    assert torch.equal(ours["embed.tokens.weight"], theirs["bert.embeddings.word_embeddings.weight"])
    assert torch.equal(ours["head.dense.weight"], theirs["cls.predictions.transform.dense.weight"])
    assert torch.equal(ours["head.norm.bias"], theirs["cls.predictions.transform.LayerNorm.bias"])
    assert torch.equal(ours["head.bias"], theirs["cls.predictions.bias"])
    assert set(ours) == set(SlidingLM(slm_from_hf(hf_dirs["bert"]).model.config).state_dict())


def test_roberta_positions_are_offset_and_eps_kept(hf_dirs):
    hf = AutoModelForMaskedLM.from_pretrained(hf_dirs["roberta"], local_files_only=True)
    theirs = hf.state_dict()
    fields, ours = hf_to_slm_lm(hf.config, theirs)
    assert fields["max_positions"] == 40 - 2 and fields["layer_norm_eps"] == 1e-5
    positions = theirs["roberta.embeddings.position_embeddings.weight"]
    assert torch.equal(ours["embed.positions.weight"], positions[2:] + theirs["roberta.embeddings.token_type_embeddings.weight"][0])
    assert torch.equal(ours["head.dense.bias"], theirs["lm_head.dense.bias"])
    assert torch.equal(ours["head.norm.weight"], theirs["lm_head.layer_norm.weight"])
    assert torch.equal(ours["head.bias"], theirs["lm_head.bias"])
    model = slm_from_hf(hf_dirs["roberta"]).model
    assert model.config.mask_id == hf.config.vocab_size - 1 and model.embed.norm.eps == 1e-5


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_our_mlm_from_hf_weights_gives_the_hf_pll(hf_dirs, name):
    """The strong check of the mapping: same pseudo-log-likelihood per piece as the HF model itself."""
    ours = slm_from_hf(hf_dirs[name], kind="mlm")
    assert isinstance(ours.model, MaskedLM)
    theirs = load_hf_scorer("hf-masked", hf_dirs[name])
    for a, b in zip(ours.logprobs(SENTENCES), theirs.logprobs(SENTENCES)):
        assert len(a) == len(b) + 1  # ours also scores the end of sentence ([SEP] / </s>)
        assert torch.allclose(a[:-1], b, atol=1e-4)


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_slm_from_hf_scores(hf_dirs, name):
    scorer = slm_from_hf(hf_dirs[name])
    assert isinstance(scorer.model, SlidingLM)
    rows = scorer.logprobs(SENTENCES)
    assert [len(r) for r in rows] == [len(scorer.tokenizer.encode(s)) + 1 for s in SENTENCES]
    assert all(torch.isfinite(r).all() and (r < 0).all() for r in rows)
    assert scorer.token_scores(SENTENCES[:1])[0][-1][0] == "</s>"


def test_slm_from_our_mlm_checkpoint(mlm_dir):
    mlm = Scorer.from_pretrained(mlm_dir)
    slm = from_our_checkpoint(mlm_dir)
    assert isinstance(slm.model, SlidingLM) and slm.normalize == mlm.normalize
    theirs = mlm.model.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in slm.model.state_dict().items())
    scores = slm.score(["the cat sat", ""])
    assert all(s < 0 for s in scores) and scores != mlm.score(["the cat sat", ""])
    slm.save_pretrained(mlm_dir.parent / "slm")
    again = from_our_checkpoint(mlm_dir.parent / "slm")  # the same kind: carried over as it is
    assert again.score(["the cat sat"]) == pytest.approx(slm.score(["the cat sat"]))
    with pytest.raises(InputError, match="holds a 'slm' model: a 'clm' model starts from an 'mlm' or a 'clm'"):
        from_our_checkpoint(mlm_dir.parent / "slm", kind="clm")


def test_cli_writes_a_loadable_pretrained_dir(mlm_dir, hf_dirs, tmp_path):
    init_slm.main(["--from", str(mlm_dir), "--out", str(tmp_path / "ours")])
    loaded = Scorer.from_pretrained(tmp_path / "ours")
    assert loaded.model.config.kind == "slm"
    assert loaded.score(["the cat"]) == pytest.approx(from_our_checkpoint(mlm_dir).score(["the cat"]))
    init_slm.main(["--from", str(hf_dirs["bert"]), "--out", str(tmp_path / "bert"), "--case", "lower"])
    assert json.loads((tmp_path / "bert" / "config.json").read_text())["tokenizer"] == "hf"
    loaded = Scorer.from_pretrained(tmp_path / "bert")
    expected = slm_from_hf(hf_dirs["bert"], case="lower")
    assert loaded.tokenizer.case == "lower" and not loaded.normalize
    assert loaded.score(SENTENCES) == pytest.approx(expected.score(SENTENCES), abs=1e-5)


class EspnetLike(torch.nn.Module):
    """Parameter layout of slm_lm's ESPnet LM model: `lm.model.*`."""

    def __init__(self, model):
        super().__init__()
        self.lm = torch.nn.Module()
        self.lm.model = model


def test_cli_espnet_init_param(mlm_dir, hf_dirs, tmp_path):
    init_slm.main(["--from", str(mlm_dir), "--out", str(tmp_path / "ours"), "--format", "espnet"])
    conf = yaml.safe_load((tmp_path / "ours" / "lm_conf.yaml").read_text())["lm_conf"]
    mlm = Scorer.from_pretrained(mlm_dir).model
    target = EspnetLike(build_lm("slm", mlm.config.vocab_size, **conf))
    load_pretrained_model(str(tmp_path / "ours" / "lm.pth"), target, ignore_init_mismatch=False)
    assert all(torch.equal(v, mlm.state_dict()[k]) for k, v in target.lm.model.state_dict().items())
    assert (tmp_path / "ours" / "tokens.txt").read_text() == (mlm_dir / "tokens.txt").read_text()

    # a shipped model by name, carried over as it is with its own tokenizer (the mini recipe's stage 5)
    init_slm.main(["--from", "slm-books", "--out", str(tmp_path / "books"), "--format", "espnet"])
    shipped = pretrained.path("slm-books")
    assert (tmp_path / "books" / "tokens.txt").read_text() == (shipped / "tokens.txt").read_text()
    assert (tmp_path / "books" / "bpe.model").read_bytes() == (shipped / "bpe.model").read_bytes()
    conf = yaml.safe_load((tmp_path / "books" / "lm_conf.yaml").read_text())["lm_conf"]
    books = Scorer.from_pretrained("slm-books").model
    target = EspnetLike(build_lm("slm", books.config.vocab_size, **conf))
    load_pretrained_model(str(tmp_path / "books" / "lm.pth"), target, ignore_init_mismatch=False)
    assert all(torch.equal(v, books.state_dict()[k]) for k, v in target.lm.model.state_dict().items())

    # BERT body into an SLM over another (ESPnet sentencepiece) vocabulary: everything but the vocabulary.
    init_slm.main(["--from", str(hf_dirs["bert"]), "--out", str(tmp_path / "bert"), "--format", "espnet"])
    conf = yaml.safe_load((tmp_path / "bert" / "lm_conf.yaml").read_text())["lm_conf"]
    target = EspnetLike(build_lm("slm", 77, **conf))
    fresh_tokens = target.lm.model.embed.tokens.weight.clone()
    load_pretrained_model(str(tmp_path / "bert" / "lm.pth"), target, ignore_init_mismatch=False)
    bert = slm_from_hf(hf_dirs["bert"]).model.state_dict()
    got = target.lm.model.state_dict()
    assert torch.equal(got["embed.tokens.weight"], fresh_tokens)
    assert all(torch.equal(got[k], v) for k, v in bert.items() if k not in VOCAB_TENSORS)


def test_cli_errors(tmp_path, capsys):
    with pytest.raises(SystemExit, match="model directory not found, and no shipped model of that name"):
        init_slm.main(["--from", str(tmp_path / "nope"), "--out", str(tmp_path / "out")])
    (tmp_path / "gpt").mkdir()
    (tmp_path / "gpt" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(SystemExit, match="slm-init-slm: error: .*gpt"):
        init_slm.main(["--from", str(tmp_path / "gpt"), "--out", str(tmp_path / "out")])
