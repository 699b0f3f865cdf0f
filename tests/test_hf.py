"""Hugging Face baselines: causal and masked (PLL) scorers on tiny random models saved to temp dirs."""
import math

import pytest
import torch
from tokenizers.pre_tokenizers import ByteLevel
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    GPT2Tokenizer,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaTokenizer,
)

from slm_lm.common.errors import InputError
from slm_lm.model.directory import load_tokenizer, save_tokenizer
from slm_lm.model.hf_tokenizer import HFTokenizer, apply_case
from slm_lm.scoring.cache import lm_scores
from slm_lm.scoring.hf import HFCausalScorer, HFMaskedScorer, load_hf_scorer
from slm_lm.scoring.scorer import load_scorer

WORDS = "the a cat dog sat on mat and ran i am hello world it is was good bad".split()
BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "##s", "##ed", ",", ".", "!", "'"]
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "c"), ("a", "t"), ("Ġc", "at")]
SMALL = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64)


def perturb(model, seed=0):
    """Random biases and LayerNorms too (HF initialises them to 0 / 1), so a swapped tensor shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return model


def byte_vocab(specials):
    vocab = {token: i for i, token in enumerate(specials)}
    for piece in sorted(ByteLevel.alphabet()) + ["Ġt", "he", "Ġthe", "Ġc", "at", "Ġcat"]:
        vocab.setdefault(piece, len(vocab))
    return vocab


def make_bert_dir(path, max_positions=64, seed=0):
    """A tiny random BertForMaskedLM + WordPiece tokenizer saved in `path`."""
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(BERT_VOCAB)})
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(BERT_VOCAB), max_position_embeddings=max_positions, type_vocab_size=2, **SMALL)
    perturb(BertForMaskedLM(config), seed).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_roberta_dir(path, seed=0):
    """A tiny random RobertaForMaskedLM + byte-level BPE tokenizer saved in `path`."""
    vocab = byte_vocab(["<s>", "<pad>", "</s>", "<unk>"])
    vocab["<mask>"] = len(vocab)
    tokenizer = RobertaTokenizer(vocab=vocab, merges=MERGES)
    torch.manual_seed(seed)
    config = RobertaConfig(vocab_size=len(vocab), max_position_embeddings=40, pad_token_id=1, layer_norm_eps=1e-5,
                           **SMALL)
    perturb(RobertaForMaskedLM(config), seed).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_gpt2_dir(path, seed=0, n_positions=32):
    """A tiny random GPT-2 + byte-level BPE tokenizer saved in `path`."""
    vocab = byte_vocab([])
    vocab["<|endoftext|>"] = len(vocab)
    tokenizer = GPT2Tokenizer(vocab=vocab, merges=MERGES)
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(vocab), n_positions=n_positions, n_embd=32, n_layer=2, n_head=4,
                        bos_token_id=vocab["<|endoftext|>"], eos_token_id=vocab["<|endoftext|>"])
    GPT2LMHeadModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {
        "bert": make_bert_dir(root / "bert"),
        "roberta": make_roberta_dir(root / "roberta"),
        "gpt2": make_gpt2_dir(root / "gpt2"),
    }


SENTENCES = ["the cat sat on the mat.", "", "A dog ran!", "hello world, it is good", "the cats sat"]
GPT_SENTENCES = ["the cat sat on the mat.", "", "A dog ran!", "Hello, world"]


def manual_causal(scorer, sentence):
    ids = scorer.encode([sentence])[0]
    with torch.no_grad():
        logits = scorer.model(input_ids=torch.tensor([ids])).logits[0]
    logprobs = torch.log_softmax(logits.double(), -1)
    return sum(float(logprobs[i - 1, ids[i]]) for i in range(1, len(ids)))


def manual_pll(scorer, sentence):
    ids = scorer.encode([sentence])[0]
    total = 0.0
    for p in range(1, len(ids) - 1):
        copy = list(ids)
        copy[p] = scorer.tokenizer.mask_id
        with torch.no_grad():
            logits = scorer.model(input_ids=torch.tensor([copy])).logits[0, p]
        total += float(torch.log_softmax(logits.double(), -1)[ids[p]])
    return total


def test_causal_scores_every_piece_and_the_end_of_sentence(dirs):
    scorer = load_hf_scorer("hf-causal", dirs["gpt2"])
    assert isinstance(scorer, HFCausalScorer)
    eot = scorer.tokenizer.hf.convert_tokens_to_ids("<|endoftext|>")
    assert scorer.tokenizer.bos_id == scorer.tokenizer.eos_id == eot
    scores = scorer.score(GPT_SENTENCES)
    assert scores == pytest.approx([manual_causal(scorer, s) for s in GPT_SENTENCES], abs=1e-4)
    rows = scorer.token_scores(GPT_SENTENCES)
    for row, sentence, total in zip(rows, GPT_SENTENCES, scores):
        assert row[-1][0] == "</s>"
        assert len(row) == len(scorer.tokenizer.encode(sentence)) + 1
        assert sum(lp for _, lp in row) == pytest.approx(total, abs=1e-4)
    assert len(rows[1]) == 1  # the empty sentence: log P(eos | bos)


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_masked_pll_matches_one_copy_at_a_time(dirs, name):
    scorer = load_hf_scorer("hf-masked", dirs[name])
    assert isinstance(scorer, HFMaskedScorer)
    scores = scorer.score(SENTENCES)
    assert scores == pytest.approx([manual_pll(scorer, s) for s in SENTENCES], abs=1e-4)
    assert scores[1] == 0.0  # no pieces: nothing scored ([CLS]/[SEP] are never masked)
    rows = scorer.token_scores(SENTENCES)
    assert [len(r) for r in rows] == [len(scorer.tokenizer.encode(s)) for s in SENTENCES]
    assert all(lp < 0 for row in rows for _, lp in row)


@pytest.mark.parametrize("spec", ["hf-causal:gpt2", "hf-masked:bert", "hf-masked:roberta"])
def test_batching_and_order_do_not_change_scores(dirs, spec):
    kind, _, name = spec.partition(":")
    texts = GPT_SENTENCES if kind == "hf-causal" else SENTENCES
    big = load_scorer(f"{kind}:{dirs[name]}")
    small = load_scorer(f"{kind}:{dirs[name]}", max_tokens=8)  # one row per forward pass
    a = big.score(texts)
    assert all(math.isfinite(x) for x in a)
    assert small.score(texts) == pytest.approx(a, abs=1e-4)
    assert big.score(texts[::-1]) == pytest.approx(a[::-1], abs=1e-4)
    assert big.name == small.name and big.name.startswith(kind)


def test_names_differ_between_models_and_case_options(dirs, tmp_path):
    a = load_hf_scorer("hf-masked", dirs["bert"])
    other = load_hf_scorer("hf-masked", make_bert_dir(tmp_path / "other", seed=1))
    lowered = load_hf_scorer("hf-masked", dirs["bert"], case="sentence")
    assert len({a.name, other.name, lowered.name}) == 3


def test_case_options():
    assert apply_case("HELLO I'M SURE I AM", "as-is") == "HELLO I'M SURE I AM"
    assert apply_case("HELLO I'M SURE I AM", "lower") == "hello i'm sure i am"
    assert apply_case("HELLO I'M SURE I AM IN IT", "sentence") == "Hello I'm sure I am in it"
    assert apply_case("'TIS I", "sentence") == "'Tis I"
    assert apply_case("", "sentence") == ""
    with pytest.raises(ValueError, match="case"):
        apply_case("x", "title")


def test_case_option_changes_what_the_model_sees(dirs):
    upper = "THE CAT SAT"
    as_is = load_hf_scorer("hf-causal", dirs["gpt2"])
    sentence = load_hf_scorer("hf-causal", dirs["gpt2"], case="sentence")
    assert sentence.encode([upper]) == as_is.encode(["The cat sat"])
    assert sentence.score([upper]) == pytest.approx(as_is.score(["The cat sat"]), abs=1e-5)


def test_bad_input_is_reported_with_its_index(dirs, tmp_path):
    scorer = load_hf_scorer("hf-masked", dirs["bert"])
    with pytest.raises(InputError, match=r"sentence 1: unknown text \['zebra'\]") as err:
        scorer.score(["the cat", "the zebra"])
    assert err.value.index == 1
    assert scorer.score(["the cat"]) != load_hf_scorer("hf-masked", dirs["bert"], unknown="unk").score(["the zebra"])
    with pytest.raises(InputError, match="sentence 0: expected a string"):
        scorer.score([None])
    long = " ".join(["the cat"] * 40)
    with pytest.raises(InputError, match="sentence 0: 80 tokens exceed the model's limit of 62"):
        scorer.score([long])
    truncated = load_hf_scorer("hf-masked", dirs["bert"], truncate=True)
    assert len(truncated.token_scores([long])[0]) == 62
    with pytest.raises(InputError, match="model directory not found"):
        load_scorer(f"hf-masked:{tmp_path / 'missing'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty"):
        load_scorer(f"hf-causal:{tmp_path / 'empty'}")
    with pytest.raises(InputError, match="cannot load a hf-masked model"):
        load_hf_scorer("hf-masked", dirs["gpt2"])
    with pytest.raises(InputError, match="whole-word scoring needs an slm_lm model"):
        load_scorer(f"hf-masked:{dirs['bert']}", whole_words=True)


def test_truncated_safetensors_is_reported_in_one_line(dirs, tmp_path, capsys):
    import shutil

    from slm_lm.bin import score as score_cli

    broken = shutil.copytree(dirs["gpt2"], tmp_path / "gpt2")
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    (tmp_path / "in.txt").write_text("the cat\n")
    with pytest.raises(SystemExit) as e:
        score_cli.main(["--model", f"hf-causal:{broken}", "--input", str(tmp_path / "in.txt")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert f"{broken}: cannot load a hf-causal model (missing, truncated or garbled file?)" in err


def test_tokenizer_adapter_round_trip(dirs, tmp_path):
    tokenizer = HFTokenizer.from_dir(dirs["roberta"], case="lower")
    assert (tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id) == (0, 2, 1)
    assert tokenizer.mask_id == tokenizer.vocab_size - 1
    ids = tokenizer.encode("THE CAT")
    assert tokenizer.decode(ids) == "the cat"
    assert tokenizer.pieces("THE CAT") == [tokenizer.id_to_piece(i) for i in ids] == ["t", "he", "Ġcat"]
    save_tokenizer(tokenizer, tmp_path / "saved")
    again = load_tokenizer(tmp_path / "saved", hf=True)
    assert again.case == "lower" and again.encode("THE CAT") == ids and again.vocab_size == tokenizer.vocab_size


def test_hf_scorers_plug_into_rescoring(dirs, tmp_path):
    scorer = load_scorer(f"hf-masked:{dirs['bert']}")
    texts = ["the cat sat", "the cat sat", "a dog ran"]
    table = lm_scores(scorer, texts, cache_dir=tmp_path, progress=False)
    assert table == pytest.approx(dict(zip(["the cat sat", "a dog ran"], scorer.score(["the cat sat", "a dog ran"]))))
    assert lm_scores(scorer, texts, cache_dir=tmp_path, progress=False) == table  # from the cache


def test_the_cache_key_covers_the_whole_hf_config(dirs, tmp_path):
    """Issue 32: an edited field of config.json (here layer_norm_eps, which changes the scores) gives another
    cache key; an untouched copy elsewhere keeps it (where the model was loaded from is not part of it)."""
    import json
    import shutil

    original = load_hf_scorer("hf-masked", dirs["bert"])
    copy = shutil.copytree(dirs["bert"], tmp_path / "copy")
    assert load_hf_scorer("hf-masked", copy).name == original.name
    edited = shutil.copytree(dirs["bert"], tmp_path / "edited")
    config = json.loads((edited / "config.json").read_text())
    config["layer_norm_eps"] = 0.5
    (edited / "config.json").write_text(json.dumps(config))
    changed = load_hf_scorer("hf-masked", edited)
    assert changed.name != original.name
    assert changed.score(SENTENCES[:1]) != pytest.approx(original.score(SENTENCES[:1]), abs=1e-6)


class _Printer:
    def __reduce__(self):
        return (print, ("code ran",))


def test_a_refused_pickle_in_an_hf_bin_is_one_line(tmp_path, capsys):
    """A pytorch_model.bin holding a non-tensor object: torch's weights_only refusal, one line naming the file."""
    from safetensors.torch import load_file

    from slm_lm.bin import score

    directory = make_bert_dir(tmp_path / "bert")
    weights = load_file(str(directory / "model.safetensors"))
    (directory / "model.safetensors").unlink()
    torch.save({"x": _Printer(), **weights}, directory / "pytorch_model.bin")
    (tmp_path / "in.txt").write_text("the cat\n")
    with pytest.raises(SystemExit) as exit_info:
        score.main(["--model", f"hf-masked:{directory}", "--input", str(tmp_path / "in.txt"),
                    "--output", str(tmp_path / "out.tsv")])
    assert exit_info.value.code == 2
    err = capsys.readouterr()
    assert err.err.splitlines()[-1] == (f"slm-score: error: {directory / 'pytorch_model.bin'}: refused to unpickle "
                                        "objects other than tensors (print) (torch.load weights_only); re-save the "
                                        "model with save_pretrained (safetensors)")
    assert "code ran" not in err.out + err.err and not (tmp_path / "out.tsv").exists()
