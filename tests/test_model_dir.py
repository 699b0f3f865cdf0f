"""The model directory: save/export and load, ESPnet experiments (old `lm.backbone.*` checkpoints included),
resolving a spec, and slm-average-models."""
import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from slm_lm import build_lm
from slm_lm.bin import average_models as average_cli
from slm_lm.common.errors import InputError
from slm_lm.common.fileio import read_json
from slm_lm.model import directory as model_dir
from slm_lm.model.bpe import train_bpe
from slm_lm.scoring.hf import hf_spec
from slm_lm.scoring.scorer import Scorer

TEXT = "AND GOD SAW THE LIGHT THAT IT WAS GOOD\nIT'S A QUICK BROWN FOX JUMPING OVER THE LAZY DOG\n"
SENTENCES = ["AND GOD SAW THE LIGHT", "THE LAZY DOG", ""]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    (d / "text.txt").write_text(TEXT * 40)
    return train_bpe(d / "text.txt", d / "bpe", vocab_size=40)


def tiny(kind, tokenizer, seed=0):
    torch.manual_seed(seed)
    return build_lm(kind, tokenizer.vocab_size, size="tiny", max_positions=48).eval()


def test_save_pretrained_and_export_load_back_to_the_same_scores(tokenizer, tmp_path):
    model = tiny("slm", tokenizer)
    expected = Scorer(model, tokenizer).score(SENTENCES)
    model_dir.save_pretrained(tmp_path / "fp32", model, tokenizer, {"normalize": True})
    model_dir.export(tmp_path / "fp16", model, tokenizer, {"normalize": True, "whole_words": True}, {"seed": 3})
    assert sorted(p.name for p in (tmp_path / "fp16").iterdir()) == sorted(
        [model_dir.SAFETENSORS_FILE, model_dir.CONFIG_FILE, model_dir.TRAINING_FILE, *model_dir.TOKENIZER_FILES])
    stored = load_file(str(tmp_path / "fp16" / model_dir.SAFETENSORS_FILE))
    assert model_dir.TIED_HEAD not in stored and {v.dtype for v in stored.values()} == {torch.float16}
    loaded, _, options = model_dir.load_pretrained(tmp_path / "fp32")
    assert options == {"normalize": True} and Scorer(loaded, tokenizer).score(SENTENCES) == pytest.approx(expected)
    _, _, options = model_dir.load_model(tmp_path / "fp16")
    assert options == {"normalize": True, "whole_words": True}
    assert read_json(tmp_path / "fp16" / model_dir.TRAINING_FILE) == {"seed": 3}
    half = Scorer.from_pretrained(tmp_path / "fp16", whole_words=False).score(SENTENCES)
    assert half == pytest.approx(expected, abs=0.05)


def test_a_spec_resolves_to_a_shipped_model_unless_a_directory_of_that_name_exists(tokenizer, tmp_path, monkeypatch):
    assert model_dir.resolve("slm-books") == model_dir.pretrained.path("slm-books")
    monkeypatch.chdir(tmp_path)
    model_dir.save_pretrained(tmp_path / "slm-books", tiny("clm", tokenizer), tokenizer, {})
    assert model_dir.load_model("slm-books")[0].config.kind == "clm"
    with pytest.raises(InputError, match=r"nope: model directory not found \(shipped models: clm-books, slm-books"):
        model_dir.load_model("nope")
    assert hf_spec("hf-causal:some/dir") == ("hf-causal", "some/dir")
    assert hf_spec("slm-books") is None and hf_spec("c:/models/x") is None


def espnet_experiment(tmp_path, tokenizer, state: dict):
    """An ESPnet LM experiment directory holding `state` as its averaged checkpoint."""
    import yaml

    tokenizer.save(tmp_path / "bpe")
    config = {"lm": "slm", "token_list": tokenizer.token_list, "bpemodel": str(tmp_path / "bpe" / "bpe.model"),
              "lm_conf": {"size": "tiny", "max_positions": 48}}
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / model_dir.ESPNET_CONFIG).write_text(yaml.safe_dump(config))
    torch.save(state, tmp_path / "exp" / "valid.loss.ave.pth")
    return tmp_path / "exp"


@pytest.mark.parametrize("prefix", ["lm.model.", "lm.backbone."])
def test_espnet_checkpoints_load_with_the_current_and_the_former_prefix(tokenizer, tmp_path, prefix):
    model = tiny("slm", tokenizer)
    exp = espnet_experiment(tmp_path, tokenizer, {prefix + k: v for k, v in model.state_dict().items()})
    loaded, _ = model_dir.load_espnet_experiment(exp)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())
    assert Scorer.from_pretrained(exp).score(SENTENCES) == Scorer(model, tokenizer).score(SENTENCES)


def test_espnet_resumes_and_initialises_from_an_lm_backbone_checkpoint(tokenizer, tmp_path):
    """ESPnet loads a whole-model state dict (resume, --lm_file) and an --init_param file whose keys name
    SlmLMForESPnet's model attribute `lm.backbone.*` instead of `lm.model.*`."""
    from espnet2.torch_utils.load_pretrained_model import load_pretrained_model

    from slm_lm.espnet_lm.espnet_model import SlmESPnetLanguageModel
    from slm_lm.espnet_lm.lm import SlidingLMForESPnet

    def espnet_model(seed):
        torch.manual_seed(seed)
        lm = SlidingLMForESPnet(tokenizer.vocab_size, size="tiny", max_positions=48)
        return SlmESPnetLanguageModel(lm=lm, vocab_size=tokenizer.vocab_size)

    source = espnet_model(0)
    assert all(k.startswith(model_dir.ESPNET_PREFIX) for k in source.state_dict())
    former = {k.replace("lm.model.", "lm.backbone.", 1): v for k, v in source.state_dict().items()}
    resumed = espnet_model(1)
    resumed.load_state_dict(former)  # strict: every key found
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in resumed.state_dict().items())
    torch.save(former, tmp_path / "lm.pth")
    initialised = espnet_model(2)
    load_pretrained_model(str(tmp_path / "lm.pth"), initialised, ignore_init_mismatch=False)
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in initialised.state_dict().items())


def test_average_models_averages_the_weights_of_models_of_one_kind_and_shape(tokenizer, tmp_path):
    """slm-average-models: the mean of two models' fp16 weights, the first one's config and tokenizer, both
    cards recorded; another kind, or writing over a model, is a clear error."""
    (a, b, c), out = [tmp_path / name for name in "abc"], tmp_path / "soup"
    for directory, kind, seed in ((a, "slm", 0), (b, "slm", 1), (c, "clm", 0)):
        model_dir.export(directory, tiny(kind, tokenizer, seed), tokenizer, {"normalize": True}, {"seed": seed})
    average_cli.main(["--model", str(a), "--model", str(b), "--out", str(out)])
    wa, wb, mean = (load_file(str(m / model_dir.SAFETENSORS_FILE)) for m in (a, b, out))
    assert set(mean) == set(wa) and any(not torch.equal(wa[k], wb[k]) for k in wa)
    for k in wa:
        expected = ((wa[k].float() + wb[k].float()) / 2).half()
        assert mean[k].dtype == torch.float16 and torch.allclose(mean[k].float(), expected.float(), atol=1e-3), k
    assert (out / model_dir.CONFIG_FILE).read_text() == (a / model_dir.CONFIG_FILE).read_text()
    card = json.loads((out / model_dir.TRAINING_FILE).read_text())
    assert card["averaged_from"] == [str(a), str(b)] and [c["seed"] for c in card["cards"]] == [0, 1]
    assert Scorer.from_pretrained(out).model.config.kind == "slm"
    with pytest.raises(SystemExit, match=r"c/config.json: not the config of .*a \(kind differ\)"):
        average_cli.main(["--model", str(a), "--model", str(c), "--out", str(tmp_path / "bad")])
    with pytest.raises(SystemExit, match=r"--out .*a: is the input .*a: outputs never replace"):
        average_cli.main(["--model", str(a), "--model", str(b), "--out", str(a)])
    assert not (tmp_path / "bad").exists()


def test_average_models_takes_a_shipped_name_and_records_it_as_given(tmp_path):
    """A fine-tuned model averaged with its shipped start: the name is resolved as every command resolves it,
    the card names it as given and keeps the shipped model's own card."""
    model, tokenizer, options = model_dir.load_model("slm-books")
    model.load_state_dict({k: v + 1 if v.is_floating_point() else v for k, v in model.state_dict().items()})
    tuned, out = tmp_path / "tuned", tmp_path / "half"
    model_dir.export(tuned, model, tokenizer, options, {"seed": 1})
    average_cli.main(["--model", "slm-books", "--model", str(tuned), "--out", str(out)])
    shipped = model_dir.resolve("slm-books")
    start, mean = (load_file(str(m / model_dir.SAFETENSORS_FILE)) for m in (shipped, out))
    assert set(mean) == set(start)
    for k in start:
        assert torch.allclose(mean[k].float(), start[k].float() + 0.5, atol=1e-2), k
    card = json.loads((out / model_dir.TRAINING_FILE).read_text())
    assert card["averaged_from"] == ["slm-books", str(tuned)]
    assert card["cards"] == [read_json(shipped / model_dir.TRAINING_FILE), {"seed": 1}]


@pytest.mark.parametrize("module", ["slm_lm.bin.average_models", "slm_lm.bin.model_card"])
def test_model_directory_commands_run_as_modules(module):
    result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, check=True)
    assert result.stdout.startswith(f"usage: slm-{module.split('.')[-1].replace('_', '-')}")


def test_config_records_the_tokenizer_and_another_one_of_the_same_size_is_refused(tokenizer, tmp_path):
    """Issue 32: save_pretrained and export record the tokenizer's digest in config.json; a folder whose
    bpe.model/tokens.txt were replaced by another tokenizer of the same size is refused naming the folder; a
    config.json without the record loads without that check."""
    import shutil

    d = tmp_path / "bpe_other"
    d.mkdir()
    (d / "text.txt").write_text("ZEBRA QUARTZ VEX JUMPS OVER LAZY DOGS\nPACK MY BOX WITH FIVE DOZEN JUGS\n" * 40)
    other = train_bpe(d / "text.txt", d / "bpe", vocab_size=40)
    assert other.vocab_size == tokenizer.vocab_size and other.digest() != tokenizer.digest()
    model = tiny("slm", tokenizer)
    model_dir.save_pretrained(tmp_path / "fp32", model, tokenizer, {"normalize": True})
    model_dir.export(tmp_path / "fp16", model, tokenizer, {"normalize": True})
    for name in ("fp32", "fp16"):
        folder = tmp_path / name
        config = json.loads((folder / model_dir.CONFIG_FILE).read_text())
        assert config[model_dir.TOKENIZER_DIGEST_KEY] == tokenizer.digest()
        swapped = shutil.copytree(folder, tmp_path / f"{name}_swapped")
        other.save(swapped)
        with pytest.raises(InputError, match=rf"^{swapped}: the tokenizer \(bpe.model, tokens.txt\) is not the one "
                                             rf"this model was saved with .*records {tokenizer.digest()}"):
            model_dir.load_pretrained(swapped)
        unrecorded = shutil.copytree(swapped, tmp_path / f"{name}_unrecorded")
        del config[model_dir.TOKENIZER_DIGEST_KEY]
        (unrecorded / model_dir.CONFIG_FILE).write_text(json.dumps(config))
        assert model_dir.load_pretrained(unrecorded)[1].digest() == other.digest()
        (unrecorded / model_dir.CONFIG_FILE).write_text(json.dumps({**config, model_dir.TOKENIZER_DIGEST_KEY: 7}))
        with pytest.raises(InputError, match="tokenizer_digest must be 16 hex digits, got '7'"):
            model_dir.load_pretrained(unrecorded)
