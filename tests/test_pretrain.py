"""slm-pretrain: corpus encoding, the step (no read-back, compiled), the budgeted schedule, resume and the fp16
export."""
import json

import numpy as np
import pytest
import torch

from slm_lm.bin import pretrain as pretrain_cli
from slm_lm.model.bpe import train_bpe
from slm_lm.common.errors import InputError
from slm_lm.common.fileio import LOCK_FILE, exclusive_dir_lock
from slm_lm.pretrain import Budget, learning_rate, load_corpus, trainer
from slm_lm.scoring.scorer import Scorer

TEXT = """IN THE BEGINNING GOD CREATED THE HEAVEN AND THE EARTH
AND THE EARTH WAS WITHOUT FORM AND VOID AND DARKNESS WAS UPON THE FACE OF THE DEEP
AND THE SPIRIT OF GOD MOVED UPON THE FACE OF THE WATERS
AND GOD SAID LET THERE BE LIGHT AND THERE WAS LIGHT
IT'S A QUICK BROWN FOX JUMPING OVER THE LAZY DOG
"""
TINY = ["--n-layers", "1", "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--max-positions", "64",
        "--batch-tokens", "256", "--threads", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("pretrain")
    (d / "text.txt").write_text(TEXT * 40)
    tokenizer = train_bpe(d / "text.txt", d / "data", vocab_size=60)
    (d / "valid.txt").write_text(TEXT)
    for name, text in (("train", d / "text.txt"), ("valid", d / "valid.txt")):
        pretrain_cli.main(["encode", "--bpe-dir", str(d / "data"), "--text", str(text), "--out", str(d / "data" / f"{name}.ids.xz")])
    return d / "data", tokenizer


def test_encoded_corpus_round_trips(data):
    directory, tokenizer = data
    sentences = load_corpus(directory / "valid.ids.xz")
    assert [tokenizer.decode(s) for s in sentences] == TEXT.splitlines()


def test_encode_names_the_bad_line(data, tmp_path):
    directory, _ = data
    (tmp_path / "bad.txt").write_text("THE EARTH\n\nTHE DEEP\n")
    with pytest.raises(SystemExit, match=r"bad.txt:2: empty line"):
        pretrain_cli.main(["encode", "--bpe-dir", str(directory), "--text", str(tmp_path / "bad.txt"),
                           "--out", str(tmp_path / "bad.ids.xz")])
    assert not (tmp_path / "bad.ids.xz").exists()
    with pytest.raises(SystemExit, match=r"--out .*train: name it NAME.ids.xz"):  # train would not find it
        pretrain_cli.main(["encode", "--bpe-dir", str(directory), "--text", str(tmp_path / "bad.txt"),
                           "--out", str(tmp_path / "train")])
    assert not (tmp_path / "train").exists()


def test_encode_max_sentences_keeps_the_first_lines(data, tmp_path):
    directory, tokenizer = data
    (tmp_path / "text.txt").write_text(TEXT)
    pretrain_cli.main(["encode", "--bpe-dir", str(directory), "--text", str(tmp_path / "text.txt"),
                       "--out", str(tmp_path / "first2.ids.xz"), "--max-sentences", "2"])
    sentences = load_corpus(tmp_path / "first2.ids.xz")
    assert [tokenizer.decode(s) for s in sentences] == TEXT.splitlines()[:2]


def test_schedule_warms_up_then_decays_to_zero():
    assert learning_rate(1.0, 0.0, 0.1) == 0.0
    assert learning_rate(1.0, 0.05, 0.1) == pytest.approx(0.5)
    assert learning_rate(1.0, 0.1, 0.1) == pytest.approx(1.0)
    assert learning_rate(1.0, 0.55, 0.1) == pytest.approx(0.5)
    assert learning_rate(1.0, 1.0, 0.1) == 0.0


def test_cpu_budget_counts_only_the_training_process_time():
    budget = Budget(10.0, "cpu")
    budget.resume()
    sum(i * i for i in range(300000))
    budget.pause()
    spent = budget.spent
    assert spent > 0 and budget.fraction(0) == pytest.approx(spent / 10.0)
    with pytest.raises(ValueError):
        Budget(1.0, "gpu")


def test_an_update_budget_sets_the_schedule_and_ends_the_run_whatever_the_clock(data, tmp_path, capsys):
    budget = Budget(0.0, "wall", max_updates=40)
    assert budget.share(10) == budget.fraction(10) == 0.25
    for bad in ((60.0, 40), (0.0, 0)):
        with pytest.raises(ValueError, match="budget of seconds or of updates"):
            Budget(bad[0], "wall", max_updates=bad[1])
    directory, _ = data
    run = ["train", "--kind", "clm", "--data", str(directory), "--updates", "25", "--lr", "3e-3", *TINY]
    pretrain_cli.main(run + ["--out", str(tmp_path / "a")])
    pretrain_cli.main(run + ["--out", str(tmp_path / "b")])
    card = json.loads((tmp_path / "a" / "model" / "training.json").read_text())
    assert card["updates"] == 25 and card["budget_updates"] == 25 and "budget_minutes" not in card
    assert card["lr"] == pytest.approx(learning_rate(3e-3, 24 / 25, 0.05))  # the last update's: 24 of 25 done
    same = json.loads((tmp_path / "b" / "model" / "training.json").read_text())
    assert same["valid_ce"] == card["valid_ce"]  # the same run, update for update
    with pytest.raises(SystemExit) as refused:
        pretrain_cli.main(["train", "--kind", "clm", "--data", str(directory), "--out", str(tmp_path / "c"),
                           "--updates", "0", *TINY])
    assert refused.value.code == 2 and "--updates: 0: must be 1 or more" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # one budget, not two
        pretrain_cli.main(run + ["--out", str(tmp_path / "d"), "--minutes", "1"])


@pytest.mark.parametrize("kind", ["slm", "clm", "tta"])
def test_training_lowers_validation_loss_and_exports_a_scoring_ready_fp16_model(data, tmp_path, kind, device):
    directory, tokenizer = data
    out = tmp_path / kind
    pretrain_cli.main(["train", "--kind", kind, "--data", str(directory), "--out", str(out), "--updates", "300",
                       "--lr", "3e-3", "--device", device, *TINY])
    rows = [line.split("\t") for line in (out / "curve.tsv").read_text().splitlines()[1:]]
    assert len(rows) >= 2 and int(rows[-1][1]) == 300 and float(rows[-1][4]) < float(rows[0][4]) - 0.5
    card = json.loads((out / "model" / "training.json").read_text())
    assert card["kind"] == kind and card["updates"] == int(rows[-1][1]) > 0
    from safetensors.torch import load_file

    weights = load_file(str(out / "model" / "model.safetensors"))
    assert all(t.dtype == torch.float16 for t in weights.values()) and "head.embedding.weight" not in weights
    scorer = Scorer.from_pretrained(out / "model")
    assert scorer.model.config.kind == kind
    good, bad = scorer.score(["AND GOD SAID LET THERE BE LIGHT", "LIGHT BE THERE LET SAID GOD AND"])
    assert good > bad


def test_slm_content_loss_trains_and_is_recorded_on_the_card(data, tmp_path):
    directory, _ = data
    out = tmp_path / "slm"
    pretrain_cli.main(["train", "--kind", "slm", "--data", str(directory), "--out", str(out), "--updates", "300",
                       "--lr", "3e-3", "--content-loss", "1", "--content-sample", "0.5",
                       *TINY])
    rows = [line.split("\t") for line in (out / "curve.tsv").read_text().splitlines()[1:]]
    assert len(rows) >= 2 and int(rows[-1][1]) == 300 and float(rows[-1][4]) < float(rows[0][4]) - 0.5
    card = json.loads((out / "model" / "training.json").read_text())
    assert card["content_weight"] == 1.0 and card["content_sample"] == 0.5
    for bad in (["--kind", "clm", "--content-loss", "1"],
                ["--kind", "slm", "--content-loss", "1", "--content-sample", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            pretrain_cli.main(["train", "--data", str(directory), "--out", str(tmp_path / "bad"),
                               "--minutes", "0.01", *bad, *TINY])
        assert exit_info.value.code == 2


def test_whole_words_training_validates_as_the_scorer_scores_and_saves_the_default(data, tmp_path):
    """--whole-words: the curve's last validation CE is the exported model's whole-word CE on valid.txt
    (its config makes whole words the scoring default), not its piece CE; the card records it; an MLM,
    whose training masks 15 % of the pieces, refuses it."""
    directory, tokenizer = data
    out = tmp_path / "slm"
    pretrain_cli.main(["train", "--kind", "slm", "--data", str(directory), "--out", str(out), "--updates", "300",
                       "--lr", "3e-3", "--whole-words", *TINY])  # an update budget: the same model on any machine
    training = json.loads((out / "model" / "training.json").read_text())
    valid_ce = training["valid_ce"]
    assert training["whole_words"] is True and training["updates"] == 300
    sentences = TEXT.splitlines()
    pieces = sum(len(tokenizer.encode(s)) + 1 for s in sentences)
    words, as_pieces = Scorer.from_pretrained(out / "model"), Scorer.from_pretrained(out / "model", whole_words=False)
    whole_ce, piece_ce = (-sum(scorer.score(sentences)) / pieces for scorer in (words, as_pieces))
    assert whole_ce == pytest.approx(valid_ce, abs=0.002)  # fp16 export
    assert abs(piece_ce - valid_ce) > 0.01, (whole_ce, piece_ce, valid_ce)  # 0.028 apart after 300 updates
    with pytest.raises(SystemExit, match="whole-word training is not implemented for the masked LM"):
        pretrain_cli.main(["train", "--kind", "mlm", "--data", str(directory), "--out", str(tmp_path / "mlm"),
                           "--minutes", "0.01", "--whole-words", *TINY])


def test_init_starts_from_a_saved_models_weights_of_any_kind_with_the_same_parameters(data, tmp_path):
    directory, _ = data
    run = ["train", "--data", str(directory), "--valid-every", "1", "--lr", "3e-3", *TINY]
    pretrain_cli.main(run + ["--kind", "slm", "--out", str(tmp_path / "a"), "--updates", "300"])
    trained_ce = json.loads((tmp_path / "a" / "model" / "training.json").read_text())["valid_ce"]
    pretrain_cli.main(run + ["--kind", "slm", "--out", str(tmp_path / "b"), "--minutes", "0.02",
                             "--init", str(tmp_path / "a" / "model")])
    first_row = (tmp_path / "b" / "curve.tsv").read_text().splitlines()[1].split("\t")
    assert first_row[1] == "0" and float(first_row[4]) == pytest.approx(trained_ce, abs=0.02)  # fp16 weights
    assert json.loads((tmp_path / "b" / "model" / "training.json").read_text())["init"] == str(tmp_path / "a" / "model")
    pretrain_cli.main(run + ["--kind", "clm", "--out", str(tmp_path / "c"), "--minutes", "0.02",
                             "--init", str(tmp_path / "a" / "model")])  # the same backbone: an SLM's weights fit a CLM
    pretrain_cli.main(run + ["--kind", "bilm", "--out", str(tmp_path / "bilm"), "--minutes", "0.02"])
    with pytest.raises(SystemExit, match=r"--init .*bilm.*: its bilm weights do not fit this slm"):
        pretrain_cli.main(run + ["--kind", "slm", "--out", str(tmp_path / "d"), "--minutes", "0.02",
                                 "--init", str(tmp_path / "bilm" / "model")])
    with pytest.raises(SystemExit, match=r"--init slm-books: its tokenizer is not the one of the training data"):
        pretrain_cli.main(run + ["--kind", "slm", "--out", str(tmp_path / "e"), "--minutes", "0.02",
                                 "--init", "slm-books"])
    assert not (tmp_path / "e" / "model").exists()


def test_a_finished_run_resumes_from_its_checkpoint_without_training_again(data, tmp_path):
    directory, _ = data
    args = ["train", "--kind", "clm", "--data", str(directory), "--out", str(tmp_path / "clm"), "--minutes", "0.02",
            "--valid-every", "1", *TINY]
    pretrain_cli.main(args)
    before = (tmp_path / "clm" / "curve.tsv").read_text()
    updates = json.loads((tmp_path / "clm" / "model" / "training.json").read_text())["updates"]
    pretrain_cli.main(args)
    after = json.loads((tmp_path / "clm" / "model" / "training.json").read_text())["updates"]
    assert after == updates and (tmp_path / "clm" / "curve.tsv").read_text().startswith(before)


def test_a_run_stopped_by_its_deadline_keeps_its_schedule_and_resumes(data, tmp_path):
    """The deadline ends this process early without decaying the learning rate; the next process resumes."""
    directory, _ = data
    args = ["train", "--kind", "clm", "--data", str(directory), "--out", str(tmp_path / "clm"), "--minutes", "0.2",
            "--valid-every", "1", "--lr", "1e-3", "--warmup", "0.01", *TINY]
    pretrain_cli.main(args + ["--deadline", "0.04"])
    first = json.loads((tmp_path / "clm" / "model" / "training.json").read_text())
    assert first["spent_minutes"] < 0.1 and first["lr"] > 0.4e-3  # schedule about a quarter through, not at 0
    pretrain_cli.main(args)
    second = json.loads((tmp_path / "clm" / "model" / "training.json").read_text())
    assert second["updates"] > first["updates"] and second["spent_minutes"] >= 0.2 and second["lr"] < 0.1e-3


def test_corrupt_corpus_is_a_clear_error(tmp_path):
    (tmp_path / "x.ids.xz").write_bytes(b"not lzma")
    with pytest.raises(InputError, match="x.ids.xz: cannot read the encoded corpus"):
        load_corpus(tmp_path / "x.ids.xz")


def test_a_run_killed_at_a_checkpoint_resumes_bit_identically_with_dropout(data, tmp_path, monkeypatch, device,
                                                                          deterministic_algorithms):
    """Dropout draws from torch's generator: the checkpoint holds it (and every other random-number state), so a
    run killed after its checkpoint at update 12 and resumed ends with the very weights of an uninterrupted run
    (with deterministic algorithms: on CUDA two uninterrupted runs differ in the last bits without them)."""
    directory, _ = data
    run = ["train", "--kind", "slm", "--data", str(directory), "--updates", "30", "--dropout", "0.1", "--lr", "3e-3",
           "--device", device, *TINY]
    pretrain_cli.main(run + ["--out", str(tmp_path / "whole"), "--valid-every", "1000"])

    class Killed(Exception):
        pass

    update = trainer._TrainingRun.update

    def killed_at_12(self, epoch, batch):
        if self.state["updates"] == 12:
            raise Killed
        update(self, epoch, batch)

    with monkeypatch.context() as patch:
        patch.setattr(trainer._TrainingRun, "update", killed_at_12)
        with pytest.raises(Killed):  # --valid-every 0: a checkpoint before every update
            pretrain_cli.main(run + ["--out", str(tmp_path / "resumed"), "--valid-every", "0"])
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["state"]["updates"] == 12
    assert not (tmp_path / "resumed" / LOCK_FILE).exists()  # the killed run let go of its --out
    pretrain_cli.main(run + ["--out", str(tmp_path / "resumed"), "--valid-every", "1000"])
    whole, resumed = (torch.load(tmp_path / name / "checkpoint.pt", weights_only=True) for name in ("whole", "resumed"))
    assert whole["state"]["updates"] == resumed["state"]["updates"] == 30
    assert whole["model"].keys() == resumed["model"].keys()
    assert all(torch.equal(whole["model"][k], resumed["model"][k]) for k in whole["model"])


def test_exclusive_dir_lock_admits_one_holder_at_a_time(tmp_path):
    out = tmp_path / "out"
    with exclusive_dir_lock(out, "slm-pretrain") as lock:
        assert lock == out / LOCK_FILE and "slm-pretrain (pid " in lock.read_text()
        with pytest.raises(InputError, match=rf"{out}: in use by slm-pretrain \(pid \d+ .*give slm-rescore another"):
            with exclusive_dir_lock(out, "slm-rescore"):
                pass
    assert not lock.exists()
    with exclusive_dir_lock(out, "slm-rescore"):  # free again
        pass
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="afile: is a file, not a directory"):
        with exclusive_dir_lock(tmp_path / "afile", "slm-pretrain"):
            pass


def test_encode_records_the_tokenizer_and_load_checks_it(data, tmp_path):
    """NAME.ids.json names the tokenizer; given another tokenizer of the same size load_corpus refuses the
    corpus; without the record (an older corpus) only the vocabulary range is checked."""
    directory, tokenizer = data
    record = json.loads((directory / "valid.ids.json").read_text())
    assert record["tokenizer"] == tokenizer.digest() and record["sentences"] == len(TEXT.splitlines())
    assert len(load_corpus(directory / "valid.ids.xz", tokenizer)) == len(TEXT.splitlines())
    (tmp_path / "other.txt").write_text("ZEBRA QUARTZ VEX JUMPS OVER LAZY DOGS\nPACK MY BOX WITH FIVE JUGS\n" * 60)
    other = train_bpe(tmp_path / "other.txt", tmp_path / "other", vocab_size=60)  # as the fixture's
    assert other.vocab_size == tokenizer.vocab_size and other.digest() != tokenizer.digest()
    with pytest.raises(InputError, match=r"valid.ids.xz: encoded with another tokenizer"):
        load_corpus(directory / "valid.ids.xz", other)
    for name in ("valid.ids.xz", "valid.ids.json"):
        (tmp_path / name).write_bytes((directory / name).read_bytes())
    (tmp_path / "valid.ids.json").write_text(json.dumps({**record, "corpus_sha1": "0" * 40}))
    with pytest.raises(InputError, match=r"valid.ids.json: describes another corpus than valid.ids.xz"):
        load_corpus(tmp_path / "valid.ids.xz", tokenizer)
    (tmp_path / "valid.ids.json").unlink()
    assert len(load_corpus(tmp_path / "valid.ids.xz", other)) == len(TEXT.splitlines())  # no record: no check


def _stats(directory) -> dict:
    """(inode, mtime) of `directory` and of each file in it: what a rewrite would change."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in [directory, *sorted(directory.iterdir())]}


def test_keep_models_keeps_a_scoring_ready_model_of_every_validation(data, tmp_path):
    """--keep-models: OUT/snapshots/N/ for every validated update count N, each a scorer with its own card;
    the last is OUT/model/; no leftover of the staging. Without it: no snapshots/."""
    directory, _ = data
    run = ["train", "--kind", "clm", "--data", str(directory), "--updates", "4", "--valid-every", "0", *TINY]
    out = tmp_path / "kept"
    pretrain_cli.main(run + ["--out", str(out), "--keep-models"])
    rows = {int(row.split("\t")[1]): float(row.split("\t")[4])
            for row in (out / "curve.tsv").read_text().splitlines()[1:]}
    assert sorted(rows) == [0, 1, 2, 3, 4]  # --valid-every 0: a validation before every update and at the end
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == [str(n) for n in sorted(rows)]
    weights = {}
    for updates, valid_ce in rows.items():
        snapshot = out / "snapshots" / str(updates)
        card = json.loads((snapshot / "training.json").read_text())
        assert card["updates"] == updates and card["valid_ce"] == pytest.approx(valid_ce, abs=1e-4)
        scores = Scorer.from_pretrained(snapshot).score(["AND GOD SAID LET THERE BE LIGHT"])
        assert len(scores) == 1 and np.isfinite(scores[0])
        weights[updates] = (snapshot / "model.safetensors").read_bytes()
    assert len(set(weights.values())) == len(rows) - 1  # each validation's weights (the first update's lr is 0)
    for name in ("model.safetensors", "config.json", "training.json", "bpe.model", "tokens.txt"):
        assert (out / "snapshots" / "4" / name).read_bytes() == (out / "model" / name).read_bytes(), name
    pretrain_cli.main(run + ["--out", str(tmp_path / "plain")])
    assert (tmp_path / "plain" / "model").is_dir() and not (tmp_path / "plain" / "snapshots").exists()


def test_keep_models_never_rewrites_a_snapshot_and_resumes_with_or_without_it(data, tmp_path):
    """A finished run run again, or a resumed one validating again at the same updates, leaves the snapshot
    there as it is; a run may be resumed without --keep-models and again with it; a killed snapshot's staging
    left in snapshots/ is removed by the next run."""
    directory, _ = data
    out = tmp_path / "run"
    run = ["train", "--kind", "clm", "--data", str(directory), "--out", str(out), "--valid-every", "0", *TINY]
    pretrain_cli.main(run + ["--updates", "3", "--keep-models"])
    kept = {n: _stats(out / "snapshots" / n) for n in ("0", "3")}
    leftover = out / "snapshots" / ".slm-pretrain.killed.swap"  # a run killed while writing its snapshot
    (leftover / "new" / "5").mkdir(parents=True)
    (leftover / "new" / "5" / "model.safetensors").write_bytes(b"half")
    pretrain_cli.main(run + ["--updates", "3", "--keep-models"])  # finished: validates at 3 again
    assert {n: _stats(out / "snapshots" / n) for n in ("0", "3")} == kept
    assert not leftover.exists()
    pretrain_cli.main(run + ["--updates", "5"])  # resumed without it: no snapshot of 4 or 5
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == ["0", "1", "2", "3"]
    pretrain_cli.main(run + ["--updates", "6", "--keep-models"])  # resumed with it: validates at 5 again, then 6
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == ["0", "1", "2", "3", "5", "6"]
    assert {n: _stats(out / "snapshots" / n) for n in ("0", "3")} == kept
    assert json.loads((out / "snapshots" / "5" / "training.json").read_text())["updates"] == 5
    assert (out / "snapshots" / "6" / "model.safetensors").read_bytes() == (out / "model" / "model.safetensors").read_bytes()


def test_keep_models_refuses_a_snapshots_of_no_run_and_says_when_one_cannot_be_written(data, tmp_path, monkeypatch,
                                                                                     capsys):
    """An --out with a snapshots/ but no checkpoint is refused as one with a model/ (one line, exit 2, nothing
    touched); a snapshot that cannot be written (a full disk) ends the run with one line naming snapshots/,
    which is left as it was (here: not there)."""
    import errno

    from slm_lm.model import directory as model_dir

    directory, _ = data
    run = ["train", "--kind", "clm", "--data", str(directory), "--updates", "2", *TINY]
    out = tmp_path / "mine"
    (out / "snapshots" / "0").mkdir(parents=True)
    (out / "snapshots" / "0" / "notes.txt").write_text("mine\n")
    for option in ([], ["--keep-models"]):
        with pytest.raises(SystemExit) as stop:
            pretrain_cli.main(run + ["--out", str(out), *option])
        line = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and line.startswith(f"slm-pretrain: error: {out / 'snapshots'}: not written by"), line
        assert sorted(p.name for p in out.rglob("*")) == ["0", "notes.txt", "snapshots"]

    write_atomic = model_dir.write_atomic

    def full_under_snapshots(path, data):
        if "snapshots" in path.parts:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        write_atomic(path, data)

    monkeypatch.setattr(model_dir, "write_atomic", full_under_snapshots)
    out = tmp_path / "full"
    with pytest.raises(SystemExit) as stop:
        pretrain_cli.main(run + ["--out", str(out), "--keep-models"])
    errors = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert stop.value.code == 2 and len(errors) == 1, errors
    assert errors[0].startswith(f"slm-pretrain: error: --keep-models {out / 'snapshots'}: cannot write the outputs "
                                "(No space left on device: "), errors[0]
    assert errors[0].endswith("; it is as it was") and not (out / "snapshots").exists()
    assert (out / "model" / "training.json").exists()  # the validation's other outputs are written before
    monkeypatch.undo()
    (out / "snapshots").write_text("a file\n")
    curve = (out / "curve.tsv").read_text()
    with pytest.raises(SystemExit) as stop:  # refused before training, not at the first validation
        pretrain_cli.main(run + ["--out", str(out), "--keep-models"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and line == f"slm-pretrain: error: --keep-models {out / 'snapshots'}: is a file, not a directory"
    assert (out / "curve.tsv").read_text() == curve  # no update trained


READ_BACK = {"aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::item", "aten::equal",
             "aten::masked_select"}  # what makes the host wait for the device


def test_a_training_step_reads_nothing_back_from_the_device(data, tmp_path, monkeypatch):
    """Every op of every update (forward, backward, clipping, AdamW, the loss kept for the curve) is counted
    under a dispatch mode: none of them reads a value back to the host, for every kind and objective."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class ReadBacks(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._schema.name in READ_BACK:
                self.seen.append(func._schema.name)
            return func(*args, **(kwargs or {}))

    update = trainer._TrainingRun.update
    counts = {}

    def counted(self, epoch, batch):
        with ReadBacks() as mode:
            update(self, epoch, batch)
        counts.setdefault(self.settings.kind, []).append(mode.seen)

    monkeypatch.setattr(trainer._TrainingRun, "update", counted)
    directory, _ = data
    for kind, extra in [("slm", ["--content-loss", "1", "--content-sample", "0.5", "--whole-words"]),
                        ("clm", []), ("mlm", []), ("bilm", ["--whole-words"]), ("tta", [])]:
        pretrain_cli.main(["train", "--kind", kind, "--data", str(directory), "--out", str(tmp_path / kind),
                           "--updates", "3", "--compile", "off", *extra, *TINY])
    kinds = ("slm", "clm", "mlm", "bilm", "tta")
    assert {kind: len(steps) for kind, steps in counts.items()} == dict.fromkeys(kinds, 3)
    assert all(seen == [] for steps in counts.values() for seen in steps), counts


def test_the_compiled_step_runs_whole_without_recompiling(data, tmp_path, monkeypatch):
    """--compile on: forward and backward in one graph (fullgraph), compiled once before the budget (its
    seconds on the card); batch after batch and a validation in between, nothing recompiles; it trains as the
    eager step does (without dropout, whose random draws differ)."""
    import torch._dynamo

    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    torch._dynamo.reset()
    directory, _ = data
    out = tmp_path / "compiled"
    pretrain_cli.main(["train", "--kind", "slm", "--data", str(directory), "--out", str(out), "--updates", "6",
                       "--valid-every", "0", "--compile", "on", "--lr", "3e-3", "--dropout", "0", *TINY])
    card = json.loads((out / "model" / "training.json").read_text())
    assert card["updates"] == 6 and card["compile_seconds"] > 0
    eager = tmp_path / "eager"
    pretrain_cli.main(["train", "--kind", "slm", "--data", str(directory), "--out", str(eager), "--updates", "6",
                       "--valid-every", "0", "--compile", "off", "--lr", "3e-3", "--dropout", "0", *TINY])
    curves = [[row.split("\t") for row in (d / "curve.tsv").read_text().splitlines()[1:]] for d in (out, eager)]
    assert [r[:3] for r in curves[0]] == [r[:3] for r in curves[1]]
    assert [float(r[4]) for r in curves[0]] == pytest.approx([float(r[4]) for r in curves[1]], abs=1e-3)
