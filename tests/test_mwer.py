"""MWER training: the loss against a hand computation, its gradient, training to the oracle, exact resume, the
rescoring of test lists with held-out weights, and bad input."""
import json
import math

import pytest
import torch

from slm_lm import build_lm
from slm_lm.bin import mwer_train as cli
from slm_lm.model.bpe import train_bpe
from slm_lm.pretrain import mwer_trainer as trainer
from slm_lm.pretrain.mwer import mixed_loss, mwer_per_utterance
from slm_lm.rescoring.wer import word_errors
from slm_lm.scoring.scorer import Scorer

TEXT = """IN THE BEGINNING GOD CREATED THE HEAVEN AND THE EARTH
AND THE EARTH WAS WITHOUT FORM AND VOID AND DARKNESS WAS UPON THE FACE OF THE DEEP
AND THE SPIRIT OF GOD MOVED UPON THE FACE OF THE WATERS
AND GOD SAID LET THERE BE LIGHT AND THERE WAS LIGHT
AND GOD SAW THE LIGHT THAT IT WAS GOOD AND GOD DIVIDED THE LIGHT FROM THE DARKNESS
IT'S A QUICK BROWN FOX JUMPING OVER THE LAZY DOG
"""
REFS = TEXT.splitlines()


def test_mwer_loss_equals_a_hand_computation():
    """Utterance 1 has two hypotheses (its third column is padding, with values that would change the result),
    utterance 2 three; lambda 0.5, score scale 2."""
    fixed = torch.tensor([[0.0, -1.0, 100.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    lm = torch.tensor([[-2.0, -0.5, 100.0], [-1.0, -1.0, -3.0]], dtype=torch.float64)
    errors = torch.tensor([[1.0, 0.0, 50.0], [2.0, 0.0, 4.0]], dtype=torch.float64)
    real = torch.tensor([[True, True, False], [True, True, True]])
    loss = mwer_per_utterance(fixed, lm, errors, real, lam=0.5, scale=2.0)
    # utterance 1: scaled totals -2 and -2.5, mean errors 0.5
    p = math.exp(-2) / (math.exp(-2) + math.exp(-2.5))
    first = p * (1 - 0.5) + (1 - p) * (0 - 0.5)
    # utterance 2: scaled totals -1, -1, -3, mean errors 2
    z = 2 * math.exp(-1) + math.exp(-3)
    second = (math.exp(-1) * 0 + math.exp(-1) * -2 + math.exp(-3) * 2) / z
    assert loss.tolist() == pytest.approx([first, second], abs=1e-12)
    ce_sum = torch.tensor(12.0, dtype=torch.float64)
    assert float(mixed_loss(loss, ce_sum, 4, 0.5)) == pytest.approx((first + second) / 2 + 0.5 * 3.0, abs=1e-12)
    assert float(mixed_loss(loss, ce_sum, 4, 0.0)) == pytest.approx((first + second) / 2, abs=1e-12)


def test_the_gradient_moves_the_score_toward_the_lower_error_hypothesis():
    fixed = torch.zeros(1, 3, dtype=torch.float64)
    lm = torch.tensor([[-1.0, -1.5, -2.0]], dtype=torch.float64, requires_grad=True)
    errors = torch.tensor([[3.0, 0.0, 1.0]], dtype=torch.float64)
    real = torch.ones(1, 3, dtype=torch.bool)
    before = mwer_per_utterance(fixed, lm, errors, real, lam=1.0)
    before.sum().backward()
    assert lm.grad[0, 1] < 0 < lm.grad[0, 0]  # descent raises the correct hypothesis, lowers the worst
    with torch.no_grad():
        stepped = lm - 0.5 * lm.grad
    after = mwer_per_utterance(fixed, stepped, errors, real, lam=1.0)
    posterior = [torch.softmax(x, dim=1)[0, 1] for x in (lm.detach(), stepped)]
    assert posterior[1] > posterior[0] and float(after) < float(before.detach())


def corrupted(ref: str) -> list[str]:
    """Three wrong versions of `ref`, each of its length: its first two words swapped, its second word and its
    last word replaced by another word of the text."""
    words = ref.split()
    other = {w: "LIGHT" if w != "LIGHT" else "GOD" for w in words}
    return [" ".join([words[1], words[0]] + words[2:]), " ".join(words[:1] + [other[words[1]]] + words[2:]),
            " ".join(words[:-1] + [other[words[-1]]])]


@pytest.fixture(scope="module")
def lists(tmp_path_factory):
    """Training lists (TSV, 2 utterances of each of 3 speakers, the reference always at rank 2, every AM score
    0) and a test list of two other utterances; returns (directory, model directory)."""
    d = tmp_path_factory.mktemp("mwer")
    (d / "text.txt").write_text(TEXT * 20)
    tokenizer = train_bpe(d / "text.txt", d / "bpe", vocab_size=60)
    torch.manual_seed(0)
    model = build_lm("slm", tokenizer.vocab_size, size="tiny", max_positions=64, dropout=0.1)
    Scorer(model, tokenizer).save_pretrained(d / "model")
    rows, refs = [], []
    for k, ref in enumerate(REFS):
        uttid = f"s{k % 3}-{k:04d}"
        refs.append(f"{uttid} {ref}")
        hyps = corrupted(ref)
        for rank, text in enumerate(hyps[:1] + [ref] + hyps[1:], start=1):
            rows.append(f"{uttid}\t{rank}\t0\t{text}")
    (d / "train.tsv").write_text("\n".join(rows) + "\n")
    (d / "train.ref").write_text("\n".join(refs) + "\n")
    test_rows = [f"t9-{k}\t{r}\t{-0.1 * r}\t{t}" for k, ref in enumerate(REFS[:2])
                 for r, t in enumerate([ref] + corrupted(ref), start=1)]
    (d / "test.tsv").write_text("\n".join(test_rows) + "\n")
    (d / "test.ref").write_text("".join(f"t9-{k} {ref}\n" for k, ref in enumerate(REFS[:2])))
    return d


def list_wer(model_dir, lists_dir) -> tuple[int, int]:
    """(word errors of the hypotheses a model prefers on the training list with AM 0, reference words)."""
    scorer = Scorer.from_pretrained(model_dir)
    chosen = []
    for ref in REFS:
        hyps = corrupted(ref)
        hyps = hyps[:1] + [ref] + hyps[1:]
        scores = scorer.score(hyps)
        chosen.append(hyps[max(range(len(hyps)), key=lambda i: (scores[i], -i))])
    return sum(word_errors(REFS, chosen)), sum(len(r.split()) for r in REFS)


def test_training_on_lists_holding_the_reference_drives_their_wer_to_the_oracle(lists, tmp_path):
    """Score scale 0.1: the random model's sentence scores differ by tens of nats, where a softmax at scale 1
    saturates on a wrong hypothesis and gives no gradient."""
    errors, words = list_wer(lists / "model", lists)
    assert errors > 0  # the starting model prefers some wrong hypothesis: the oracle is 0
    cli.main(["--model", str(lists / "model"), "--train", str(lists / "train.tsv"), "--train-ref",
              str(lists / "train.ref"), "--held-out", "0", "--lambda", "1", "--lm-weight", "0", "--lr", "3e-3",
              "--scale", "0.1", "--updates", "150", "--batch-tokens", "200", "--valid-every", "50",
              "--out", str(tmp_path / "out"),
              "--no-progress", "--threads", "1"])
    assert list_wer(tmp_path / "out" / "model", lists) == (0, words)
    card = json.loads((tmp_path / "out" / "model" / "training.json").read_text())
    assert card["training"].startswith("discriminative: minimum word error rate")
    assert card["loss"]["lambda"] == 1.0 and card["train_sets"][0]["utterances"] == len(REFS)
    assert "init_card" not in card  # the starting model has no card of its own


RUN = ["--train-ref", None, "--held-out", "0.3", "--lm-weight", "0.5", "--lr", "3e-3", "--updates", "9",
       "--batch-tokens", "200", "--valid-every", "2", "--patience", "0", "--no-progress", "--threads", "1"]


def run_args(lists, out, test=True) -> list[str]:
    args = ["--model", str(lists / "model"), "--train", str(lists / "train.tsv"), *RUN, "--out", str(out)]
    args[args.index("--train-ref") + 1] = str(lists / "train.ref")
    if test:
        args += ["--test", str(lists / "test.tsv"), "--test-ref", str(lists / "test.ref")]
    return args


def test_a_killed_run_resumes_to_the_model_of_an_unbroken_run(lists, tmp_path, monkeypatch, capsys):
    """Dropout draws from torch's generator; a run killed after its checkpoint at update 4 and resumed ends with
    the weights, curve and test rescoring of an unbroken run."""
    cli.main(run_args(lists, tmp_path / "whole"))
    assert "test (test): AM-only" in capsys.readouterr().out

    class Killed(Exception):
        pass

    update = trainer.MwerRun.update

    def killed_at_5(self, batch):
        if self.state["updates"] == 5:
            raise Killed
        update(self, batch)

    with monkeypatch.context() as patch:
        patch.setattr(trainer.MwerRun, "update", killed_at_5)
        with pytest.raises(Killed):
            cli.main(run_args(lists, tmp_path / "resumed"))
    saved = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)
    assert json.loads(saved["state"])["updates"] == 4
    cli.main(run_args(lists, tmp_path / "resumed"))
    whole, resumed = (torch.load(tmp_path / n / "checkpoint.pt", weights_only=True) for n in ("whole", "resumed"))
    assert json.loads(whole["state"])["updates"] == json.loads(resumed["state"])["updates"] == 9
    assert all(torch.equal(whole["model"][k], resumed["model"][k]) for k in whole["model"])
    for name in ("curve.tsv", "rescore/test/1best_recog/text", "model/training.json"):
        assert (tmp_path / "whole" / name).read_text() == (tmp_path / "resumed" / name).read_text()
    curve = (tmp_path / "whole" / "curve.tsv").read_text().splitlines()
    assert [row.split("\t")[0] for row in curve[1:]] == ["0", "2", "4", "6", "8", "9"]
    assert "| train_heldout | dev |" in (tmp_path / "whole" / "rescore" / "RESULTS.md").read_text()
    capsys.readouterr()
    cli.main(run_args(lists, tmp_path / "resumed"))  # a finished run: nothing trained again, the test rescored
    assert "stopped: budget after 9 updates" in capsys.readouterr().out
    assert (tmp_path / "whole" / "curve.tsv").read_text() == (tmp_path / "resumed" / "curve.tsv").read_text()


def test_a_resumed_run_with_other_settings_is_refused(lists, tmp_path, capsys):
    cli.main(run_args(lists, tmp_path / "out", test=False))
    args = run_args(lists, tmp_path / "out", test=False)
    args[args.index("--lr") + 1] = "1e-3"
    with pytest.raises(SystemExit) as err:
        cli.main(args)
    assert err.value.code == 2
    assert capsys.readouterr().err.strip().endswith("(lr differ); resume it with its options or give another --out")


@pytest.mark.parametrize("change, message", [
    (["--fixed", "lm=0.5"], "--fixed 'lm=0.5': want score:NAME=WEIGHT"),
    (["--fixed", "score:lm=x"], "--fixed 'score:lm=x': the weight 'x' is not a number"),
    (["--held-out", "0.9"], "--held-out 0.9: the 3 speaker(s) of the training lists would all be held out"),
    (["--test", "TRAIN", "--test-ref", "TRAINREF"], "test utterance 's0-0000' is in the training lists"),
    (["--held-out", "0"], "--lambda: needed when nothing is held out (--held-out 0)"),
])
def test_bad_input_is_one_line(lists, tmp_path, capsys, change, message):
    args = run_args(lists, tmp_path / "out", test=False)
    change = [str(lists / "train.tsv") if c == "TRAIN" else str(lists / "train.ref") if c == "TRAINREF" else c
              for c in change]
    with pytest.raises(SystemExit) as err:
        cli.main(args + change)
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1
    assert lines[0].startswith("slm-mwer-train: error: ") and message in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_masked_lm_is_refused(lists, tmp_path, capsys):
    tokenizer = Scorer.from_pretrained(lists / "model").tokenizer
    Scorer(build_lm("mlm", tokenizer.vocab_size, size="tiny", max_positions=64), tokenizer).save_pretrained(
        tmp_path / "mlm")
    args = run_args(lists, tmp_path / "out", test=False)
    args[args.index("--model") + 1] = str(tmp_path / "mlm")
    with pytest.raises(SystemExit):
        cli.main(args)
    assert "a 'mlm' model; MWER training needs a sentence's score in one pass" in capsys.readouterr().err


def test_no_epochs_evaluates_the_starting_model_with_the_held_out_weights(lists, tmp_path, capsys):
    args = run_args(lists, tmp_path / "out")
    args[args.index("--updates"):args.index("--updates") + 2] = ["--epochs", "0"]
    cli.main(args)
    assert (tmp_path / "out" / "curve.tsv").read_text().splitlines()[1].split("\t")[0] == "0"
    assert len((tmp_path / "out" / "curve.tsv").read_text().splitlines()) == 2
    card = json.loads((tmp_path / "out" / "model" / "training.json").read_text())
    assert card["updates"] == 0 and card["budget_updates"] == 0
    start, kept = Scorer.from_pretrained(lists / "model"), Scorer.from_pretrained(tmp_path / "out" / "model")
    assert kept.score(REFS) == pytest.approx(start.score(REFS), abs=0.05)  # the fp16 export of the same weights
    assert "test (test): AM-only" in capsys.readouterr().out


@pytest.mark.parametrize("trainable, trained", [("head-bias", lambda name, p: name == "head.bias"),
                                                ("bitfit", lambda name, p: p.dim() == 1)])
def test_trainable_changes_only_its_parameters(lists, tmp_path, trainable, trained):
    """--trainable head-bias trains the output bias alone, bitfit every bias and LayerNorm parameter alone; the
    rest keeps the starting model's values to the bit, and the card says what was trained."""
    cli.main(run_args(lists, tmp_path / "out", test=False) + ["--trainable", trainable, "--lr", "1e-2"])
    start = Scorer.from_pretrained(lists / "model").model.state_dict()
    final = torch.load(tmp_path / "out" / "checkpoint.pt", weights_only=True)["model"]
    changed = {name for name, value in final.items() if not torch.equal(value, start[name])}
    assert changed == {name for name, p in start.items() if trained(name, p)}
    card = json.loads((tmp_path / "out" / "model" / "training.json").read_text())
    assert card["trainable"]["parameters"] == trainable
    assert card["trainable"]["count"] == sum(p.numel() for name, p in start.items() if trained(name, p))


def test_the_word_bonus_is_tuned_on_the_held_out_lists_and_used_for_the_test(lists, tmp_path, capsys):
    """Every list: the sentence and two deletions of it, AM 0. An LM sums negative log-probabilities, so it prefers
    some shorter, wrong hypothesis; a large enough word bonus picks the sentence every time. With --beta-range
    the held-out tuning chooses that bonus, the curve and the card record it and the test lists are rescored with
    it; without, the bonus stays 0."""
    rows, refs, test_rows, test_refs = [], [], [], []
    for k, ref in enumerate(REFS * 2):
        words = ref.split()
        hyps = [" ".join(words[1:]), " ".join(words[:-1]), ref]
        uttid = f"s{k % 4}-{k:04d}"
        (test_rows if k < 2 else rows).extend(f"{uttid}\t{r}\t0\t{h}" for r, h in enumerate(hyps, start=1))
        (test_refs if k < 2 else refs).append(f"{uttid} {ref}\n")
    for name, lines in (("train.tsv", rows), ("test.tsv", test_rows)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    (tmp_path / "train.ref").write_text("".join(refs))
    (tmp_path / "test.ref").write_text("".join(test_refs))
    args = ["--model", str(lists / "model"), "--train", str(tmp_path / "train.tsv"), "--train-ref",
            str(tmp_path / "train.ref"), "--test", str(tmp_path / "test.tsv"), "--test-ref", str(tmp_path / "test.ref"),
            "--held-out", "0.5", "--lambda", "1", "--lambda-range", "1", "--epochs", "0", "--no-progress",
            "--threads", "1"]
    for beta_range, bonus in (("0,100", 100.0), ("0", 0.0)):
        out = tmp_path / f"out_{bonus:g}"
        cli.main(args + ["--beta-range", beta_range, "--out", str(out)])
        assert f"word bonus = {bonus:g}" in capsys.readouterr().out
        curve = (out / "curve.tsv").read_text().splitlines()
        assert curve[0].split("\t")[-1] == "heldout_beta" and float(curve[1].split("\t")[-1]) == bonus
        wer = float(curve[1].split("\t")[4])
        assert (wer == 0.0) == (bonus == 100.0)  # the bonus picks every sentence; the LM alone does not
        card = json.loads((out / "model" / "training.json").read_text())
        assert card["best"]["heldout_beta"] == bonus
        assert json.loads((out / "rescore" / "tuning.json").read_text())["best"]["beta"] == bonus
        chosen = (out / "rescore" / "test" / "1best_recog" / "text").read_text().splitlines()
        assert (sorted(chosen) == sorted(r.strip() for r in test_refs)) == (bonus == 100.0)
