"""A command killed (SIGKILL) at any moment while it writes leaves its earlier outputs or its new ones, and
its next run finishes what the kill left on its own; a resumed pre-training run's curve agrees with its
checkpoint."""
import json
import os
import signal
from pathlib import Path

import pytest

from slm_lm.rescoring.report import check_out_dir, install_outputs

TEXT = "IN THE BEGINNING GOD CREATED THE HEAVEN AND THE EARTH\nAND GOD SAID LET THERE BE LIGHT\n"
TINY = ["--n-layers", "1", "--d-model", "16", "--n-heads", "2", "--d-ff", "32", "--max-positions", "32",
        "--batch-tokens", "64", "--threads", "1"]


def _write_run(tag: str, sets):
    """A `write(staging)` for install_outputs writing a run's outputs, each file saying `tag`."""
    def write(staging):
        for name in sets:
            (staging / name / "1best_recog").mkdir(parents=True)
            (staging / name / "1best_recog" / "text").write_text(f"{tag} {name}\n")
        (staging / "RESULTS.md").write_text(f"{tag}\n")
        (staging / "dev_wer_vs_lambda.png").write_text(f"{tag}\n")
        (staging / "tuning.json").write_text(json.dumps({"tag": tag, "sets": [{"name": n} for n in sets],
                                                          "grid": [], "best": {}}))
    return write


def _snapshot(out, read=lambda p: p.read_text()):
    return {str(p.relative_to(out)): read(p) for p in sorted(out.rglob("*")) if p.is_file()}


def _killed_at_move(call, kill_at: int) -> bool:
    """Run `call()` in a child process SIGKILLed at its `kill_at`-th rename or replace; True when it was killed."""
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        try:
            moves, rename, replace = [0], os.rename, os.replace

            def counted(move):
                def counting(src, dst):
                    moves[0] += 1
                    if moves[0] == kill_at:
                        os.kill(os.getpid(), signal.SIGKILL)
                    move(src, dst)
                return counting

            os.rename, os.replace = counted(rename), counted(replace)
            call()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status)


def test_rescore_outputs_killed_at_every_rename_leave_one_run_and_the_next_run_recovers(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    install_outputs(out, ["dev", "old_only"], _write_run("old", ["dev", "old_only"]))
    old = _snapshot(out)
    install_outputs(tmp_path / "ref", ["dev", "test"], _write_run("new", ["dev", "test"]))
    new = {**_snapshot(tmp_path / "ref"), "notes.txt": "mine\n"}
    kill_at, killed = 1, True
    while killed:
        killed = _killed_at_move(lambda: install_outputs(out, ["dev", "test"], _write_run("new", ["dev", "test"])),
                                 kill_at)
        check_out_dir(out, ["dev", "test"])  # what the next run does first: finish or undo the killed one
        after = _snapshot(out)
        assert after in (old, new), f"killed at rename {kill_at}"
        assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []
        if after == new:  # back to the old run for the next kill point
            install_outputs(out, ["dev", "old_only"], _write_run("old", ["dev", "old_only"]))
            assert _snapshot(out) == old
        kill_at += 1
    assert kill_at > 8  # it did get killed between the moves of the old entries and of the new ones


@pytest.mark.parametrize("moment", ["before", "after"])
def test_a_pretraining_run_killed_around_its_checkpoint_keeps_a_curve_that_agrees_with_it(moment, tmp_path,
                                                                                          monkeypatch):
    """Killed just before or just after saving its checkpoint at update 6, then resumed, then run again
    once finished: the curve's updates only go up, one row per validation, the last the checkpoint's."""
    from slm_lm.bin import pretrain as pretrain_cli
    from slm_lm.model.bpe import train_bpe
    from slm_lm.pretrain import trainer

    (tmp_path / "text.txt").write_text(TEXT * 4)
    train_bpe(tmp_path / "text.txt", tmp_path / "data", vocab_size=60)
    for name in ("train", "valid"):
        pretrain_cli.main(["encode", "--bpe-dir", str(tmp_path / "data"), "--text", str(tmp_path / "text.txt"),
                           "--out", str(tmp_path / "data" / f"{name}.ids.xz")])
    run = ["train", "--kind", "clm", "--data", str(tmp_path / "data"), "--updates", "10", "--out",
           str(tmp_path / "out"), *TINY]
    save = trainer.save_checkpoint

    class Killed(BaseException):
        pass

    def killed_at_6(path, model, optimizer, state, *args):
        if moment == "after":
            save(path, model, optimizer, state, *args)
        if state["updates"] == 6:
            raise Killed
        if moment == "before":
            save(path, model, optimizer, state, *args)

    with monkeypatch.context() as patch:
        patch.setattr(trainer, "save_checkpoint", killed_at_6)
        with pytest.raises(Killed):  # --valid-every 0: a validation and a checkpoint before every update
            pretrain_cli.main(run + ["--valid-every", "0"])
    pretrain_cli.main(run + ["--valid-every", "1000"])
    curve = (tmp_path / "out" / "curve.tsv").read_text()
    updates = [int(row.split("\t")[1]) for row in curve.splitlines()[1:]]
    assert updates == [*range(6 if moment == "before" else 7), 10]
    pretrain_cli.main(run + ["--valid-every", "1000"])  # finished: nothing to add
    assert (tmp_path / "out" / "curve.tsv").read_text() == curve


def test_a_pretraining_export_killed_at_every_move_leaves_one_whole_model(tmp_path):
    """slm-pretrain replaces its model/ at every validation: a kill at any moment leaves the earlier export or
    the new one whole (weights, config, tokenizer and card of one validation), and the next run (which calls
    finish_interrupted first) leaves no journal behind."""
    import torch

    from slm_lm.common.outputs import finish_interrupted
    from slm_lm.model.bpe import train_bpe
    from slm_lm.model.config import LMConfig
    from slm_lm.model.kinds import model_from_config
    from slm_lm.pretrain.trainer import COMMAND, install_model

    (tmp_path / "text.txt").write_text(TEXT * 4)
    tokenizer = train_bpe(tmp_path / "text.txt", tmp_path / "bpe", vocab_size=60)
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(model_from_config(LMConfig(kind="slm", vocab_size=tokenizer.vocab_size, n_layers=1,
                                                 d_model=16, n_heads=2, d_ff=32, max_positions=32)))
    read = Path.read_bytes
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.pt").write_text("the run's other files stay\n")
    install_model(tmp_path / "ref", models[1], tokenizer, {"run": "new"})
    new = {**_snapshot(tmp_path / "ref", read), "checkpoint.pt": b"the run's other files stay\n"}
    kill_at, killed = 1, True
    while killed:
        install_model(out, models[0], tokenizer, {"run": "old"})
        old = _snapshot(out, read)
        killed = _killed_at_move(lambda: install_model(out, models[1], tokenizer, {"run": "new"}), kill_at)
        finish_interrupted(out, COMMAND)
        after = _snapshot(out, read)
        assert after in (old, new), f"killed at move {kill_at}"
        assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "model"], f"killed at move {kill_at}"
        kill_at += 1
    assert kill_at > 6  # killed while the files were written and while model/ was moved into place


def test_a_snapshot_killed_at_any_move_is_whole_or_absent_once_the_next_run_starts(tmp_path):
    """A process SIGKILLed at each rename of `keep_snapshot` (its files written in staging, its plan, the
    snapshot's move into place) leaves no snapshot or a whole one, never a half one under its name; after
    `finish_interrupted` (what the next run calls first) snapshots/ holds nothing else."""
    from slm_lm.common.outputs import finish_interrupted
    from slm_lm.model.bpe import train_bpe
    from slm_lm.model.config import LMConfig
    from slm_lm.model.kinds import model_from_config
    from slm_lm.pretrain.trainer import COMMAND, keep_snapshot

    (tmp_path / "text.txt").write_text(TEXT * 4)
    tokenizer = train_bpe(tmp_path / "text.txt", tmp_path / "bpe", vocab_size=60)
    model = model_from_config(LMConfig(kind="clm", vocab_size=tokenizer.vocab_size, n_layers=1, d_model=16,
                                       n_heads=2, d_ff=32, max_positions=32))
    keep_snapshot(tmp_path / "ref", 7, model, tokenizer, {"updates": 7})
    whole = _snapshot(tmp_path / "ref" / "snapshots" / "7", Path.read_bytes)
    kill_at, killed = 1, True
    while killed:
        out = tmp_path / f"killed{kill_at}"
        killed = _killed_at_move(lambda: keep_snapshot(out, 7, model, tokenizer, {"updates": 7}), kill_at)
        for finished in (False, True):
            if finished:
                finish_interrupted(out / "snapshots", COMMAND)
            shown = [p.name for p in (out / "snapshots").iterdir() if not p.name.startswith(".")]
            assert shown in ([], ["7"]), (kill_at, shown)
            if shown:
                assert _snapshot(out / "snapshots" / "7", Path.read_bytes) == whole, kill_at
        assert [p.name for p in (out / "snapshots").iterdir()] == shown, kill_at
        kill_at += 1
    assert kill_at > 5 and shown == ["7"]  # killed while the files were written and while it was moved
