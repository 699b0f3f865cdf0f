"""ESPnet integration: the four kinds train with ESPnet's trainer (`slm-lm-train`), resume exactly,
load into `Scorer.from_pretrained`, and bad inputs fail with `InputError` naming file and line.

Data: a slice of the shared Gutenberg text (one book), normalised LibriSpeech-style, with a small
sentencepiece model trained on the fly. Training runs in-process on CPU with a tiny model.
"""
import argparse
import gzip
import math
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml

from conftest import MIRROR
from slm_lm.model.bpe import train_bpe
from slm_lm.common.errors import InputError
from slm_lm.espnet_lm.data import write_espnet_text
from slm_lm.data.text_norm import normalize_librispeech

REPO = Path(__file__).resolve().parents[1]
BOOK = MIRROR / "text" / "gutenberg" / "pg10124.txt.gz"
MINI_CONFIG = REPO / "egs" / "librispeech_slm" / "conf" / "train_lm_{kind}_mini.yaml"
# An ESPnet LM experiment written by slm_lm 0.1.0 before its modules moved into wings (its README.md).
OLD_EXPERIMENT = REPO / "tests" / "data" / "espnet_lm_exp_0.1.0"
N_TRAIN, N_VALID = 1500, 150
# The tiny training run: the mini recipe config with a very small model (2 layers, d_model 32, no
# dropout), batches of ~1024 padded pieces (~40 sentences), 4 epochs x 120 updates = 480 updates at a
# nearly constant lr after 30 warm-up updates (bidirectional models first sit on a unigram plateau).
TINY = {
    "lm_conf": {"size": "tiny", "d_model": 32, "n_heads": 2, "d_ff": 64, "dropout": 0.0, "max_positions": 256},
    "batch_bins": 1024, "num_iters_per_epoch": 120, "max_epoch": 4, "num_workers": 0, "seed": 0,
    "scheduler_conf": {"warmup_steps_list": [0, 30, 4800], "warmup_lr_list": [0.0, 0.005, 0.0]},
    "use_matplotlib": False, "use_tensorboard": False,
}


def tiny_config(directory: Path, kind: str, **update) -> Path:
    """The shipped mini config of `kind` with TINY (and `update`) applied, written to directory."""
    config = yaml.safe_load(Path(str(MINI_CONFIG).format(kind=kind)).read_text())
    config.update(TINY, **update)
    path = directory / f"tiny_{kind}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """train/valid ESPnet text + shape files, bpe.model and tokens.txt from one Gutenberg book."""
    root = tmp_path_factory.mktemp("espnet_lm_data")
    with gzip.open(BOOK, "rt", encoding="utf-8") as f:
        paragraphs = f.read().split("\n\n")
    sentences = []
    for paragraph in paragraphs:
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(paragraph.split())):
            normalised = normalize_librispeech(sentence)
            if 3 <= len(normalised.split()) <= 25:
                sentences.append(normalised)
    assert len(sentences) >= N_TRAIN + N_VALID, len(sentences)
    (root / "train.txt").write_text("\n".join(sentences[:N_TRAIN]) + "\n")
    (root / "valid.txt").write_text("\n".join(sentences[N_TRAIN : N_TRAIN + N_VALID]) + "\n")
    tokenizer = train_bpe(root / "train.txt", root / "tok", vocab_size=150)
    for split in ("train", "valid"):
        write_espnet_text(root / f"{split}.txt", root / split, root / "tok" / "bpe.model")
    return {"root": root, "vocab_size": tokenizer.vocab_size}


def train_args(data, out, kind="slm", max_epoch=4, extra=(), config=None):
    root = data["root"]
    return [
        "--config", str(config or tiny_config(out.parent, kind)), "--max_epoch", str(max_epoch),
        "--token_list", str(root / "tok" / "tokens.txt"), "--bpemodel", str(root / "tok" / "bpe.model"),
        "--token_type", "bpe",
        "--train_data_path_and_name_and_type", f"{root}/train/text,text,text",
        "--train_shape_file", f"{root}/train/text_shape",
        "--valid_data_path_and_name_and_type", f"{root}/valid/text,text,text",
        "--valid_shape_file", f"{root}/valid/text_shape",
        "--output_dir", str(out), *extra,
    ]


def train(args):
    from slm_lm.espnet_lm.task import SlmLMTask

    torch.set_num_threads(1)
    SlmLMTask.main(cmd=args)


def reporter_stats(out):
    """{epoch: {"train": {...}, "valid": {...}}} from ESPnet's checkpoint.pth."""
    return torch.load(out / "checkpoint.pth", map_location="cpu", weights_only=False)["reporter"]["stats"]


def test_espnet_batch_becomes_sentence_input():
    from slm_lm.espnet_lm.espnet_model import sentence_batch

    text = torch.tensor([[5, 6, 7], [8, 0, 0], [0, 0, 0]])
    tokens, lengths = sentence_batch(text, torch.tensor([3, 1, 0]), eos_id=9)
    assert tokens.tolist() == [[9, 5, 6, 7, 9], [9, 8, 9, 0, 0], [9, 9, 0, 0, 0]]
    assert lengths.tolist() == [5, 3, 2]


def test_kinds_registered_explicitly_not_on_import(tmp_path):
    """In a fresh process: importing slm_lm's ESPnet modules leaves ESPnet's tables alone; a process that
    only builds a model (as ESPnet's per-GPU spawned workers do) gets the kinds from
    `SlmLMTask.build_model`; `register_kinds()` is idempotent and ESPnet's own LMTask parser then takes
    `--lm slm|clm|mlm|bilm|tta --model slm_lm`."""
    code = """
import argparse, sys
# without the registration hook of an installed slm_lm (slm_lm_espnet_hook.pth, tested in test_espnet_stock)
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != 'RegisterKindsFinder']
from espnet2.tasks.lm import LMTask, lm_choices, model_choices
import slm_lm.espnet_lm.task, slm_lm.bin.lm_train, slm_lm.bin.asr_inference, slm_lm.bin.lm_calc_perplexity
assert 'slm' not in lm_choices.classes and 'slm_lm' not in model_choices.classes, 'registered on import'
from slm_lm.espnet_lm.task import SlmLMTask
from slm_lm.espnet_lm.espnet_model import SlmESPnetLanguageModel
args = argparse.Namespace(lm='slm', lm_conf={'size': 'tiny'}, model='lm', model_conf={}, token_list=sys.argv[1],
                          init=None, config=None)
model = SlmLMTask.build_model(args)
assert isinstance(model, SlmESPnetLanguageModel) and args.model == 'slm_lm', (type(model), args.model)
from slm_lm.espnet_lm.registry import register_kinds
register_kinds()
for kind in ('slm', 'clm', 'mlm', 'bilm', 'tta'):
    args = LMTask.get_parser().parse_args(['--lm', kind, '--model', 'slm_lm', '--token_list', 'x', '--output_dir', 'y'])
    assert (args.lm, args.model) == (kind, 'slm_lm')
"""
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("<blank>\n<unk>\n\u2581A\n<mask>\n<sos/eos>\n")
    subprocess.run([sys.executable, "-c", code, str(tokens)], check=True, cwd=REPO)


def test_register_refuses_a_name_espnet_uses_for_another_class(monkeypatch):
    from espnet2.lm.transformer_lm import TransformerLM
    from espnet2.tasks.lm import lm_choices

    from slm_lm.espnet_lm.registry import register_kinds

    monkeypatch.setitem(lm_choices.classes, "clm", TransformerLM)
    with pytest.raises(RuntimeError, match="--lm clm is already espnet2.lm.transformer_lm.TransformerLM"):
        register_kinds()


ASR_SH_TOKENS = "<blank>\n<unk>\n\u2581A\n\u2581B\n<sos/eos>\n"  # asr.sh's layout: no <mask>


def stock_args(token_list, lm="slm", model="slm_lm", **lm_conf) -> argparse.Namespace:
    """What ESPnet's LMTask parser gives `build_model` (the parts it reads)."""
    lm_conf = {"size": "tiny", **lm_conf} if lm in ("slm", "clm", "mlm", "bilm", "tta") else lm_conf
    return argparse.Namespace(lm=lm, lm_conf=lm_conf, model=model, model_conf={}, token_list=token_list,
                              init=None, config=None)


@pytest.mark.parametrize("kind", ["slm", "mlm", "tta"])
def test_stock_lm_task_adds_mask_to_an_asr_sh_token_list_as_our_task_does(tmp_path, kind):
    """ESPnet's own `LMTask.build_model` (as stock `lm_train` calls it) with asr.sh's token list: the kinds
    that use <mask> get it before <sos/eos>, in args.token_list (which config.yaml and the preprocessor take)
    and in the model, exactly as SlmLMTask builds them, instead of taking the last piece as <mask>. A list
    that has <mask> is kept; an lm_conf mask_id pointing at another token is refused."""
    from espnet2.tasks.lm import LMTask

    from slm_lm.espnet_lm.registry import register_kinds
    from slm_lm.espnet_lm.task import SlmLMTask

    register_kinds()
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(ASR_SH_TOKENS)
    with_mask = ["<blank>", "<unk>", "\u2581A", "\u2581B", "<mask>", "<sos/eos>"]
    for token_list in (str(tokens), ASR_SH_TOKENS.split(), with_mask):
        args = stock_args(token_list, kind)
        model = LMTask.build_model(args)
        assert args.token_list == with_mask
        assert model.lm.model.config.mask_id == 4 and model.lm.model.config.vocab_size == 6
        ours = stock_args(str(tokens), kind)
        assert {k: v.shape for k, v in SlmLMTask.build_model(ours).state_dict().items()} == \
            {k: v.shape for k, v in model.state_dict().items()} and ours.token_list == with_mask
    assert LMTask.build_model(stock_args(with_mask, kind, mask_id=4)).lm.model.config.mask_id == 4
    with pytest.raises(SystemExit, match=f"--lm {kind}: lm_conf mask_id 2 is '\u2581A' in the token list, not <mask>"):
        LMTask.build_model(stock_args(str(tokens), kind, mask_id=2))  # stock lm_train: one line, exit 2


@pytest.mark.parametrize("lm_conf,needle", [
    ({"mask_id": 2}, "command line: --lm slm: lm_conf mask_id 2 is '\u2581A' in the token list, not <mask>"),
    ({"n_layer": 2}, "command line: lm_conf: unknown key(s) ['n_layer']; allowed: ['d_ff', "),
])
def test_stock_lm_train_with_a_bad_lm_conf_is_one_line(tmp_path, capsys, monkeypatch, lm_conf, needle):
    """Stock ESPnet's lm_train (which catches nothing) with a bad lm_conf: one line, exit 2, no traceback."""
    from espnet2.tasks.lm import LMTask

    from slm_lm.espnet_lm.registry import register_kinds

    register_kinds()
    monkeypatch.setattr(sys, "argv", ["/x/espnet2/bin/lm_train.py"])
    (tmp_path / "tokens.txt").write_text(ASR_SH_TOKENS)
    with pytest.raises(SystemExit) as exit_info:
        LMTask.build_model(stock_args(str(tmp_path / "tokens.txt"), "slm", **lm_conf))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err  # (ESPnet's import may print its own warnings first)
    assert err.splitlines()[-1].startswith(f"lm_train.py: error: {needle}") and "Traceback" not in err


def test_stock_lm_task_builds_other_kinds_and_our_task_adds_the_mask(tmp_path):
    """The wrapper leaves clm/bilm and ESPnet's own LMs as they were; SlmLMTask (slm_lm.bin.lm_train) still
    inserts <mask> into asr.sh's list and builds; registering twice wraps once."""
    from espnet2.tasks.lm import LMTask

    from slm_lm.espnet_lm.registry import register_kinds
    from slm_lm.espnet_lm.task import SlmLMTask

    register_kinds()
    register_kinds()
    assert not getattr(LMTask.build_model.__func__.__wrapped__, "checks_mask_token", False)
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(ASR_SH_TOKENS)
    for kind in ("clm", "bilm"):
        assert LMTask.build_model(stock_args(str(tokens), kind)).lm.model.config.vocab_size == 5
    espnet_lm = LMTask.build_model(stock_args(str(tokens), "seq_rnn", "lm", unit=8, nlayers=1))
    assert type(espnet_lm.lm).__name__ == "SequentialRNNLM"
    args = stock_args(str(tokens), "slm")
    assert SlmLMTask.build_model(args).lm.model.config.mask_id == 4
    assert args.token_list[-2:] == ["<mask>", "<sos/eos>"]


def test_shipped_configs_parse_and_hold_paper_hyper_parameters(tmp_path):
    """Every recipe config parses with ESPnet's parser and passes our checks; the tuning configs carry
    the paper's settings (8192 tokens, 125k updates, AdamW 0.9/0.98 eps 1e-6 wd 0.01, 10k warm-up to
    5e-4 then linear decay to 0)."""
    from slm_lm.bin.lm_train import get_parser
    from slm_lm.model.config import lm_config
    from slm_lm.espnet_lm.task import check_options

    conf = REPO / "egs" / "librispeech_slm" / "conf"
    paths = sorted(conf.glob("train_lm_*_mini.yaml")) + sorted((conf / "tuning").glob("train_lm_*.yaml"))
    assert len(paths) == 15, paths  # 5 kinds x (mini, small, base)
    parser = get_parser()
    for path in paths:
        args = parser.parse_args(["--config", str(path), "--token_list", "t", "--output_dir", str(tmp_path)])
        check_options(args)
        cfg = lm_config(args.lm, 5003, args.lm_conf, str(path))
        assert path.name.startswith(f"train_lm_{cfg.kind}_")
        if path.parent.name == "tuning":
            assert args.model == "slm_lm", path  # so that stock espnet2.bin.lm_train (asr.sh) builds our model
            size = path.stem.rsplit("_", 1)[1]
            assert (cfg.n_layers, cfg.d_model) == {"small": (6, 512), "base": (12, 768)}[size]
            assert args.batch_bins == 8192 and args.max_epoch * args.num_iters_per_epoch == 125000
            assert args.optim == "adamw" and args.optim_conf == {
                "lr": 5e-4, "betas": [0.9, 0.98], "eps": 1e-6, "weight_decay": 0.01}
            assert args.scheduler_conf == {"warmup_steps_list": [0, 10000, 125000],
                                           "warmup_lr_list": [0.0, 5e-4, 0.0]}
            assert cfg.dropout == 0.1 and args.use_amp


def test_stock_lm_task_trains_the_shipped_configs_with_the_kinds_objective(tmp_path):
    """ESPnet's own LMTask (stock lm_train, as asr.sh runs it) with each shipped LM config: a config without
    `model:` (ESPnet's default `lm`, a causal objective) builds `--model slm_lm` as SlmLMTask does, and
    config.yaml records it; the tuning configs turn tensorboard off (not a dependency: stock lm_train would
    fail without it)."""
    from espnet2.tasks.lm import LMTask

    from slm_lm.espnet_lm.espnet_model import SlmESPnetLanguageModel
    from slm_lm.espnet_lm.registry import register_kinds

    register_kinds()
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(ASR_SH_TOKENS)
    conf = REPO / "egs" / "librispeech_slm" / "conf"
    parser = LMTask.get_parser()
    for path in sorted(conf.glob("*_lm_*_mini.yaml")):
        args = parser.parse_args(["--config", str(path), "--token_list", str(tokens), "--output_dir", str(tmp_path)])
        assert isinstance(LMTask.build_model(args), SlmESPnetLanguageModel) and args.model == "slm_lm", path
    assert isinstance(LMTask.build_model(stock_args(str(tokens), "clm", model="lm")), SlmESPnetLanguageModel)
    for path in sorted((conf / "tuning").glob("train_lm_*.yaml")):
        args = parser.parse_args(["--config", str(path), "--token_list", str(tokens), "--output_dir", str(tmp_path)])
        assert args.model == "slm_lm" and args.use_tensorboard is False, path


def unigram_entropy(data) -> float:
    """Per-token entropy (nats) of the train pieces + end of sentence: the best context-free loss."""
    from slm_lm.model.tokenizer import Tokenizer

    tokenizer = Tokenizer(data["root"] / "tok" / "bpe.model", data["root"] / "tok" / "tokens.txt")
    counts = Counter()
    for line in (data["root"] / "train.txt").read_text().splitlines():
        counts.update(tokenizer.encode(line) + [tokenizer.eos_id])
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values())


def test_slm_validation_loss_drops_and_loads_into_scorer(data, tmp_path):
    """480 updates of a tiny SLM through ESPnet's trainer. Stated margins: the final valid loss is at
    least 0.25 nats below the epoch-1 valid loss and 0.3 below the train unigram entropy (so the model
    uses context; an untrained model scores about log V, checked below). The experiment directory
    loads into Scorer.from_pretrained with ESPnet's averaged weights."""
    from slm_lm.model.directory import load_espnet_experiment
    from slm_lm.model.kinds import model_from_config
    from slm_lm.scoring.scorer import Scorer

    out = tmp_path / "exp"
    train(train_args(data, out))
    stats = reporter_stats(out)
    valid = [stats[e]["valid"]["loss"] for e in (1, 2, 3, 4)]
    unigram = unigram_entropy(data)
    assert valid[-1] < valid[0] - 0.25, valid
    assert valid[-1] < unigram - 0.3, (valid, unigram)
    assert (out / "valid.loss.ave.pth").exists()  # ESPnet's n-best checkpoint averaging ran

    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["lm"] == "slm" and config["lm_conf"]["d_model"] == 32
    model, tokenizer = load_espnet_experiment(out)
    scorer = Scorer.from_pretrained(out)
    sentences = (data["root"] / "valid.txt").read_text().splitlines()[:40]
    n_tokens = sum(len(tokenizer.encode(s)) + 1 for s in sentences)
    trained_nll = -sum(scorer.score(sentences)) / n_tokens
    torch.manual_seed(0)
    untrained_nll = -sum(Scorer(model_from_config(model.config), tokenizer).score(sentences)) / n_tokens
    log_v = math.log(data["vocab_size"])
    assert abs(untrained_nll - log_v) < 0.5, (untrained_nll, log_v)
    assert trained_nll < untrained_nll - 0.5, (trained_nll, untrained_nll)

    state = torch.load(out / "valid.loss.ave.pth", map_location="cpu")
    for name, value in scorer.model.state_dict().items():
        torch.testing.assert_close(value, state[f"lm.model.{name}"])


@pytest.mark.parametrize("kind", ["clm", "mlm", "bilm", "tta"])
def test_baseline_kinds_train_and_load(data, tmp_path, kind):
    """Each baseline's objective trains through ESPnet (1 epoch, 120 updates): valid loss at least 0.3
    below log V (an untrained model's loss), and the experiment loads for scoring."""
    from slm_lm.scoring.scorer import Scorer

    out = tmp_path / kind
    train(train_args(data, out, kind=kind, max_epoch=1))
    stats = reporter_stats(out)
    assert stats[1]["valid"]["loss"] < math.log(data["vocab_size"]) - 0.3, stats[1]["valid"]
    scorer = Scorer.from_pretrained(out)
    assert scorer.model.config.kind == kind
    scores = scorer.score(["THE MAN WENT HOME", ""])
    assert all(math.isfinite(s) and s < 0 for s in scores)


def test_resume_matches_uninterrupted_run(data, tmp_path):
    """Stop after epoch 1 (as a kill after its checkpoint), resume with --resume true to epoch 3: the
    losses of epochs 2-3 equal an uninterrupted run's within 1e-5 relative, the final weights within
    1e-5. Dropout 0.1 is on, so the random state must be restored too."""
    lm_conf = {**TINY["lm_conf"], "dropout": 0.1}
    extra = ["--num_iters_per_epoch", "20"]
    full, part = tmp_path / "full", tmp_path / "part"
    train(train_args(data, full, max_epoch=3, extra=extra, config=tiny_config(tmp_path, "slm", lm_conf=lm_conf)))
    train(train_args(data, part, max_epoch=1, extra=extra, config=tiny_config(tmp_path, "slm", lm_conf=lm_conf)))
    assert not (part / "2epoch.pth").exists()
    resume = [*extra, "--resume", "true"]
    train(train_args(data, part, max_epoch=3, extra=resume, config=tiny_config(tmp_path, "slm", lm_conf=lm_conf)))
    a, b = reporter_stats(full), reporter_stats(part)
    for epoch in (2, 3):
        for phase in ("train", "valid"):
            assert b[epoch][phase]["loss"] == pytest.approx(a[epoch][phase]["loss"], rel=1e-5), (epoch, phase)
    wa = torch.load(full / "3epoch.pth", map_location="cpu")
    wb = torch.load(part / "3epoch.pth", map_location="cpu")
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=1e-5, atol=1e-6)


def test_autocast_runs_the_model_in_bfloat16_and_the_loss_in_float32():
    """model_conf autocast: bfloat16 puts the matmuls (here the head's) in bf16 on CPU; the loss stays float32."""
    from slm_lm.espnet_lm.espnet_model import SlmESPnetLanguageModel
    from slm_lm.espnet_lm.lm import SlidingLMForESPnet

    text, lengths = torch.tensor([[5, 6, 7], [8, 9, 0]]), torch.tensor([3, 2])
    for autocast, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        torch.manual_seed(0)
        model = SlmESPnetLanguageModel(SlidingLMForESPnet(20, size="tiny"), 20, autocast=autocast)
        seen = []
        model.lm.model.head.register_forward_hook(lambda module, args, output: seen.append(output.dtype))
        loss, _, _ = model(text, lengths)
        assert seen == [dtype] and loss.dtype == torch.float32 and torch.isfinite(loss)
    with pytest.raises(ValueError, match="int8"):
        SlmESPnetLanguageModel(SlidingLMForESPnet(20, size="tiny"), 20, autocast="int8")


def test_bf16_autocast_trains_through_espnet_close_to_fp32(data, tmp_path):
    """12 updates of a tiny SLM through ESPnet's trainer with model_conf {autocast: bfloat16}, on CPU (where
    ESPnet's use_amp does nothing): train and valid losses within 0.01 nats of the same fp32 run (same seed
    and batches), yet not identical to it (bf16 did run), and the valid loss falls."""
    extra = ["--num_iters_per_epoch", "6"]
    losses = {}
    for name, model_conf in (("fp32", {}), ("bf16", {"autocast": "bfloat16"})):
        (tmp_path / name).mkdir()
        config = tiny_config(tmp_path / name, "slm", model_conf=model_conf)
        train(train_args(data, tmp_path / name / "exp", max_epoch=2, extra=extra, config=config))
        stats = reporter_stats(tmp_path / name / "exp")
        losses[name] = [stats[e][phase]["loss"] for e in (1, 2) for phase in ("train", "valid")]
    assert losses["bf16"] == pytest.approx(losses["fp32"], abs=0.01), losses
    assert losses["bf16"] != losses["fp32"]
    assert losses["bf16"][3] < losses["bf16"][1] - 0.05, losses  # valid loss falls from epoch 1 to 2


def expect_input_error(args, *fragments):
    with pytest.raises(InputError) as info:
        train(args)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_missing_token_list(data, tmp_path):
    args = train_args(data, tmp_path / "x")
    args[args.index("--token_list") + 1] = str(tmp_path / "nope" / "tokens.txt")
    expect_input_error(args, "nope/tokens.txt", "cannot read the token list")


def test_asr_sh_token_list_without_mask(data, tmp_path):
    """A token list as ESPnet's asr.sh writes it (no <mask>): the clm keeps it as it is (so its ids are
    the ASR's); slm and mlm get <mask> inserted before <sos/eos> (the other ids unchanged); a misplaced
    <mask> is an error naming the line. Checked with ESPnet's --dry_run (model built, config.yaml saved)."""
    tokens = (data["root"] / "tok" / "tokens.txt").read_text().splitlines()
    asr_tokens = tokens[:-2] + tokens[-1:]
    plain = tmp_path / "asr_tokens.txt"
    plain.write_text("\n".join(asr_tokens) + "\n")
    for kind, expected in (("clm", asr_tokens), ("bilm", asr_tokens), ("slm", tokens), ("mlm", tokens)):
        out = tmp_path / kind
        args = train_args(data, out, kind=kind, extra=["--dry_run", "true"])
        args[args.index("--token_list") + 1] = str(plain)
        train(args)
        config = yaml.safe_load((out / "config.yaml").read_text())
        assert (config["token_list"], config["model"]) == (expected, "slm_lm"), kind
    bad = tmp_path / "tokens.txt"
    bad.write_text("\n".join(asr_tokens[:2] + ["<mask>"] + asr_tokens[2:]) + "\n")
    args = train_args(data, tmp_path / "x")
    args[args.index("--token_list") + 1] = str(bad)
    expect_input_error(args, f"{bad}:3", "<mask> must be second to last")


@pytest.mark.parametrize(
    "config_update, fragments",
    [
        ({"lm_conf": {"size": "tiny", "n_heads": 3}}, ["lm_conf", "not divisible"]),
        ({"lm_conf": {"size": "tiny", "layers": 2}}, ["lm_conf", "unknown key", "layers"]),
        ({"lm_conf": {"size": "huge"}}, ["lm_conf", "huge"]),
        ({"optim_conf": {"lr": -1.0}}, ["optim_conf", "learning rate"]),
        ({"scheduler_conf": {"warmup_steps": 10}}, ["scheduler_conf", "warmup_steps"]),
        ({"batch_bins": 0}, ["batch_bins must be positive"]),
        ({"model_conf": {"autocast": "int8"}}, ["model_conf", "autocast", "int8"]),
        ({"model_conf": {"ctc_weight": 0.3}}, ["model_conf", "ctc_weight"]),
    ],
)
def test_bad_config_values(data, tmp_path, config_update, fragments):
    config = tiny_config(tmp_path, "slm", **config_update)
    expect_input_error(train_args(data, tmp_path / "x", config=config), str(config), *fragments)


def test_unreadable_and_malformed_text(data, tmp_path):
    root = data["root"]
    lines = (root / "train" / "text").read_bytes().splitlines(keepends=True)

    missing = train_args(data, tmp_path / "x")
    i = missing.index("--train_data_path_and_name_and_type") + 1
    missing[i] = f"{tmp_path}/absent/text,text,text"
    expect_input_error(missing, "absent/text", "cannot open")

    bad_bytes = tmp_path / "latin1.txt"
    bad_bytes.write_bytes(lines[0] + b"utt_x CAF\xe9\n" + b"".join(lines[1:]))
    args = train_args(data, tmp_path / "x")
    args[i] = f"{bad_bytes},text,text"
    expect_input_error(args, f"{bad_bytes}:2", "UTF-8")

    no_text = tmp_path / "no_text.txt"
    no_text.write_bytes(b"".join(lines[:5]) + b"utt_y\n" + b"".join(lines[5:]))
    args[i] = f"{no_text},text,text"
    expect_input_error(args, f"{no_text}:6", "no text")

    short = tmp_path / "short.txt"
    short.write_bytes(b"".join(lines[:-1]))
    args[i] = f"{short},text,text"
    expect_input_error(args, f"{root}/train/text_shape:{len(lines)}", "not in", str(short))


def test_over_long_utterance_in_shape_file(data, tmp_path):
    shape = (data["root"] / "train" / "text_shape").read_text().splitlines()
    uttid = shape[2].split()[0]
    shape[2] = f"{uttid} 9999"
    path = tmp_path / "text_shape"
    path.write_text("\n".join(shape) + "\n")
    args = train_args(data, tmp_path / "x")
    args[args.index("--train_shape_file") + 1] = str(path)
    expect_input_error(args, f"{path}:3", uttid, "9999 tokens")


def test_plain_text_conversion_errors(data, tmp_path):
    bpe = data["root"] / "tok" / "bpe.model"
    empty = tmp_path / "empty_line.txt"
    empty.write_text("A B C\n\nD E\n")
    with pytest.raises(InputError, match=r"empty_line.txt:2: empty line"):
        write_espnet_text(empty, tmp_path / "out", bpe)
    assert not (tmp_path / "out" / "text").exists()
    with pytest.raises(InputError, match="absent.txt: cannot open"):
        write_espnet_text(tmp_path / "absent.txt", tmp_path / "out", bpe)


def test_cli_reports_input_error_in_one_line(data, tmp_path):
    from slm_lm.bin.lm_train import main

    args = train_args(data, tmp_path / "x")
    args[args.index("--token_list") + 1] = str(tmp_path / "missing_tokens.txt")
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2 and str(info.value).startswith("slm-lm-train: error: "), info.value
    assert "missing_tokens.txt" in str(info.value)


@pytest.mark.parametrize("text,needle", [
    ('lm: slm\nfoo: !!python/object/apply:os.system ["true"]\n',
     "py.yaml:2: could not determine a constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'"),
    ("lm: slm\nfoo: [1, 2\n", "py.yaml:3: expected ',' or ']', but got '<stream end>'"),
])
def test_a_config_yaml_cannot_load_is_one_line(data, tmp_path, capsys, text, needle):
    from slm_lm.bin.lm_train import main

    (tmp_path / "py.yaml").write_text(text)
    with pytest.raises(SystemExit) as info:
        main(train_args(data, tmp_path / "x", config=tmp_path / "py.yaml"))
    assert info.value.code == 2 and str(info.value).startswith(f"slm-lm-train: error: {tmp_path / needle}")
    assert "\n" not in str(info.value) and capsys.readouterr().err.endswith(str(info.value) + "\n")


@pytest.mark.parametrize("text,needle", [
    (b"lm: clm\nmodel: slm_lm\n# \xff\n", "c.yaml:3: not UTF-8 text (invalid start byte at byte 3 of the line)"),
    (b"lm: clm\nmodel: slm_lm\nlm_conf: 5\n", "c.yaml: lm_conf is 5, not a mapping of the LM's options"),
    (b"lm: clm\nmodel: slm_lm\ntoken_list: [a, 5, b]\n",
     "c.yaml: token_list[1] is 5, not a string (quote it in the YAML)"),
    (b"- lm\n", "c.yaml: not an ESPnet config (expected a YAML mapping)"),
])
def test_espnet_lm_configs_asr_inference_and_lm_calc_perplexity_cannot_use_are_one_line(tmp_path, text, needle):
    from slm_lm.bin.asr_inference import check_fusion_lm
    from slm_lm.bin.lm_calc_perplexity import check_train_config

    (tmp_path / "c.yaml").write_bytes(text)
    for check in (lambda: check_train_config(tmp_path / "c.yaml"), lambda: check_fusion_lm(tmp_path / "c.yaml", None)):
        with pytest.raises(InputError) as info:
            check()
        assert str(info.value) == f"{tmp_path / needle}"


@pytest.mark.parametrize("where,needle", [("tokens", "contains the input"), ("file", "is a file, not a directory")])
def test_slm_lm_train_output_dir_follows_the_output_rules(data, tmp_path, where, needle):
    from slm_lm.bin.lm_train import main

    args = train_args(data, tmp_path / "x")
    token_list = Path(args[args.index("--token_list") + 1])
    (tmp_path / "file").write_text("mine\n")
    out = token_list.parent if where == "tokens" else tmp_path / "file"
    args[args.index("--output_dir") + 1] = str(out)
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2 and str(info.value).startswith(f"slm-lm-train: error: --output_dir {out}: {needle}")
    assert (tmp_path / "file").read_text() == "mine\n"


def test_espnet_experiment_errors(data, tmp_path):
    from slm_lm.model.directory import load_espnet_experiment

    tokens = (data["root"] / "tok" / "tokens.txt").read_text().splitlines()
    config = {"lm": "transformer", "token_list": tokens, "bpemodel": str(data["root"] / "tok" / "bpe.model"),
              "lm_conf": {"size": "tiny"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(InputError, match="config.yaml: lm is 'transformer', not an slm_lm kind"):
        load_espnet_experiment(tmp_path)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**config, "lm": "slm"}))
    with pytest.raises(InputError, match="no trained weights"):
        load_espnet_experiment(tmp_path)
    torch.save({"lm.model.unexpected": torch.zeros(1)}, tmp_path / "latest.pth")
    with pytest.raises(InputError, match="latest.pth: weights do not match"):
        load_espnet_experiment(tmp_path)


def test_loading_an_espnet_experiment_does_not_import_espnet():
    code = "import sys, slm_lm, slm_lm.model.directory; assert 'espnet2' not in sys.modules, 'espnet imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_text_lines_the_shape_file_lacks_are_counted_in_a_warning(tmp_path, capsys):
    """ESPnet trains on the shape file's utterances only: text lines it lacks were dropped without a word."""
    from slm_lm.espnet_lm.checks import check_text_file, read_shape_file

    (tmp_path / "text").write_text("u1 AND GOD\nu9 SAID LET\nu2 THERE BE\nu8 LIGHT\n")
    (tmp_path / "shape").write_text("u1 2\nu2 2\n")
    check_text_file(str(tmp_path / "text"), read_shape_file(str(tmp_path / "shape"), 100), str(tmp_path / "shape"))
    err = capsys.readouterr().err.strip()
    assert err == (f"slm_lm: warning: {tmp_path / 'text'}:2: utterance u9 is not in {tmp_path / 'shape'}: 2 of the "
                   "file's lines are not trained on (ESPnet batches the shape file's utterances)")


def test_an_experiment_written_before_the_wings_scores_as_it_did():
    """The old experiment loads by its directory and gives the scores slm_lm gave it when it was written."""
    from slm_lm.scoring.scorer import Scorer

    rows = [line.split("\t") for line in (OLD_EXPERIMENT / "scores.tsv").read_text(encoding="utf-8").splitlines()]
    scores = Scorer.from_pretrained(OLD_EXPERIMENT / "exp" / "lm_slm").score([sentence for sentence, _ in rows])
    assert len(rows) == 8 and scores == pytest.approx([float(score) for _, score in rows], abs=1e-4)
