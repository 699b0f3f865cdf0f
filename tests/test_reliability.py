"""Bad input and faults (issue 11): one-line errors with exit status 2 naming the file, outputs that never
overwrite an input and appear as a whole, WER and LM on the same text, byte-order marks, cache keys.

Every test here backs a row of README.md's "Reliability" table.
"""
import json
import pickle
import shutil

import pytest
import torch

from conftest import MIRROR
from slm_lm import build_lm
from slm_lm.bin import prepare_lm_text as prep_cli
from slm_lm.bin import rescore as rescore_cli
from slm_lm.bin import score as score_cli
from slm_lm.model.bpe import train_bpe
from slm_lm.common.errors import CommandError, InputError
from slm_lm.common.fileio import read_text_lines
from slm_lm.rescoring.nbest import load_nbest
from slm_lm.scoring.cache import LMScoreCache, lm_scores
from slm_lm.scoring.scorer import Scorer, load_scorer

TEXT = "AND GOD SAW THE LIGHT\nTHE EARTH WAS WITHOUT FORM AND VOID\nIT'S A QUICK BROWN FOX\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A saved tiny SLM (config.json, model.pt, bpe.model, tokens.txt)."""
    d = tmp_path_factory.mktemp("model")
    (d / "text.txt").write_text(TEXT * 30)
    tokenizer = train_bpe(d / "text.txt", d / "bpe", vocab_size=40)
    torch.manual_seed(0)
    Scorer(build_lm("slm", tokenizer.vocab_size, size="tiny", max_positions=48), tokenizer).save_pretrained(d / "slm")
    return d / "slm"


def copy_model(model_dir, tmp_path):
    return shutil.copytree(model_dir, tmp_path / "model")


def expect_exit_2(capsys, main, argv, *needles):
    """`main(argv)` exits with status 2 and one stderr line that contains every needle."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def score_argv(model, tmp_path):
    (tmp_path / "in.txt").write_text("AND GOD SAW THE LIGHT\n")
    return ["--model", str(model), "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.tsv")]


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _empty(path):
    path.write_bytes(b"")


def _latin1_config(path):
    path.write_bytes(path.read_text().replace('"slm"', '"sl\u00e9"').encode("latin-1"))


def _edit_config(**model):
    def edit(path):
        config = json.loads(path.read_text())
        config["model"].update(model)
        path.write_text(json.dumps(config))
    return edit


def _pickled_object(path):
    torch.save({"w": torch.zeros(1), "obj": pickle.loads(pickle.dumps(ValueError("x")))}, path)


BAD_MODEL_FILES = {
    "truncated model.pt": ("model.pt", _truncate, "model.pt: not a readable torch weights file"),
    "0-byte model.pt": ("model.pt", _empty, "model.pt: empty file"),
    "pickle refused by weights_only": ("model.pt", _pickled_object, "model.pt: refused to unpickle"),
    "truncated config.json": ("config.json", _truncate, "config.json:"),
    "0-byte config.json": ("config.json", _empty, "config.json: empty file"),
    "config.json not UTF-8": ("config.json", _latin1_config, "not UTF-8 text"),
    "unknown config key": ("config.json", _edit_config(n_layer=3), "unknown config keys ['n_layer']"),
    "vocab of config and weights differ": ("config.json", _edit_config(vocab_size=45), "weights do not match"),
    "kind edited slm -> clm": ("config.json", _edit_config(kind="clm"), "declares kind 'clm' but model.pt holds"),
    "tokenizer of another vocabulary": ("tokens.txt", None, "the tokenizer has"),
}


@pytest.mark.parametrize("case", list(BAD_MODEL_FILES))
def test_bad_model_files_give_one_line_exit_2_from_every_cli(case, model_dir, tmp_path, capsys):
    name, damage, message = BAD_MODEL_FILES[case]
    model = copy_model(model_dir, tmp_path)
    if damage is None:  # the sentencepiece model and token list of another, smaller vocabulary
        other = tmp_path / "other"
        other.mkdir()
        (other / "text.txt").write_text(TEXT * 30)
        train_bpe(other / "text.txt", other / "bpe", vocab_size=38).save(model)
    else:
        damage(model / name)
    err = expect_exit_2(capsys, score_cli.main, score_argv(model, tmp_path), "slm-score: error:", message)
    assert str(model) in err
    # slm-rescore and slm-blimp load models through the same code and report it the same way.
    nbest = tmp_path / "dev.tsv"
    nbest.write_text("u1\t1\t-1.0\tAND GOD\n")
    (tmp_path / "dev.ref").write_text("u1 AND GOD\n")
    expect_exit_2(capsys, rescore_cli.main, ["--dev", str(nbest), "--dev-ref", str(tmp_path / "dev.ref"),
                                             "--lm", str(model), "--out", str(tmp_path / "r"), "--no-progress"],
                  "slm-rescore: error:", message)


def test_truncated_safetensors_and_espnet_pth(model_dir, tmp_path):
    from safetensors.torch import save_file

    from slm_lm.model.directory import load_espnet_weights

    model = copy_model(model_dir, tmp_path)
    state = torch.load(model / "model.pt", weights_only=True)
    state.pop("slm_lm.kind")
    save_file({k: v.half().contiguous() for k, v in state.items() if k != "head.embedding.weight"},
              str(model / "model.safetensors"), metadata={"slm_lm.kind": "mlm"})
    with pytest.raises(InputError, match="declares kind 'slm' but model.safetensors holds a 'mlm' model"):
        load_scorer(str(model))
    _truncate(model / "model.safetensors")
    with pytest.raises(InputError, match="model.safetensors: not a readable safetensors file"):
        load_scorer(str(model))
    pth = tmp_path / "valid.loss.ave.pth"
    torch.save({"lm.model." + k: v for k, v in state.items()}, pth)
    _truncate(pth)
    with pytest.raises(InputError, match="valid.loss.ave.pth: not a readable torch weights file"):
        load_espnet_weights(build_lm("slm", 40, size="tiny", max_positions=48), pth)


def write_nbest(tmp_path, name, hyps, refs):
    """A TSV N-best set: hyps {uttid: [(text, score), ...]}, refs {uttid: text}."""
    path = tmp_path / f"{name}.tsv"
    path.write_text("".join(f"{u}\t{r}\t{s}\t{t}\n" for u, h in hyps.items() for r, (t, s) in enumerate(h, 1)))
    ref = tmp_path / f"{name}.ref"
    ref.write_text("".join(f"{u} {t}\n" for u, t in refs.items()))
    return path, ref


HYPS = {"u1": [("AND GOD SAW THE LIGHT", -1.0), ("AND GOD SAW THE NIGHT", -1.5)],
        "u2": [("THE EARTH WAS VOID", -2.0), ("THE EARTH WAS WITHOUT FORM AND VOID", -2.1)]}
REFS = {"u1": "AND GOD SAW THE LIGHT", "u2": "THE EARTH WAS WITHOUT FORM AND VOID"}


def test_rescore_cli_with_a_real_saved_model(model_dir, tmp_path, capsys):
    dev, dev_ref = write_nbest(tmp_path, "dev", HYPS, REFS)
    out = tmp_path / "out"
    argv = ["--dev", str(dev), "--dev-ref", str(dev_ref), "--lm", str(model_dir), "--out", str(out),
            "--lambda-range", "0:1:0.5", "--no-progress"]
    rescore_cli.main(argv)
    assert "dev (dev): AM-only 25.00" in capsys.readouterr().out
    scorer = load_scorer(str(model_dir))
    record = json.loads((out / "tuning.json").read_text())
    assert record["lm"] == [scorer.name]
    chosen = json.loads((out / "dev" / "1best_recog" / "scores").read_text().splitlines()[0].split(" ", 1)[1])
    assert chosen[scorer.name] == pytest.approx(scorer.score([HYPS["u1"][chosen["rank"] - 1][0]])[0], abs=1e-6)
    # An over-long hypothesis names set, utterance and rank; --truncate (offered by the message) scores it.
    long = {"u1": HYPS["u1"], "u2": [("THE EARTH " * 20, -2.0)]}
    dev2, ref2 = write_nbest(tmp_path, "long", long, REFS)
    argv2 = ["--dev", str(dev2), "--dev-ref", str(ref2), "--lm", str(model_dir), "--out", str(tmp_path / "o2"),
             "--no-progress"]
    expect_exit_2(capsys, rescore_cli.main, argv2, "set long, utterance u2, rank 1", "long.tsv:3", "--truncate")
    rescore_cli.main(argv2 + ["--truncate", "--dtype", "bfloat16"])
    assert (tmp_path / "o2" / "RESULTS.md").is_file()


def test_rescore_outputs_never_overlap_inputs_and_replace_a_run_as_a_whole(model_dir, tmp_path, capsys):
    decode = tmp_path / "decode"
    decode.mkdir()
    dev, dev_ref = write_nbest(decode, "devset", HYPS, REFS)
    before = dev.read_bytes()
    for out in (tmp_path, decode, dev):  # around, around, the input itself
        expect_exit_2(capsys, rescore_cli.main, ["--dev", str(dev), "--dev-ref", str(dev_ref), "--lm",
                                                 str(model_dir), "--out", str(out)], "outputs never replace")
    assert dev.read_bytes() == before
    dots, dots_ref = write_nbest(tmp_path, "..", HYPS, REFS)  # a set named ".."
    expect_exit_2(capsys, rescore_cli.main, ["--dev", str(dots), "--dev-ref", str(dots_ref), "--lm",
                                             str(model_dir), "--out", str(tmp_path / "o")], "not a safe directory")
    out = tmp_path / "out"
    base = ["--dev-ref", str(dev_ref), "--lm", str(model_dir), "--out", str(out), "--no-progress"]
    rescore_cli.main(["--dev", str(dev)] + base)
    (out / "notes.txt").write_text("mine")
    other = tmp_path / "other.tsv"
    other.write_bytes(before)
    rescore_cli.main(["--dev", str(other)] + base)
    assert not (out / "devset").exists() and (out / "other" / "1best_recog" / "text").is_file()
    assert (out / "notes.txt").read_text() == "mine" and list((out / "lm_cache").iterdir())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no staging left behind


def test_slm_score_and_prepare_refuse_to_overwrite_their_input(model_dir, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("AND GOD\n")
    expect_exit_2(capsys, score_cli.main, ["--model", str(model_dir), "--input", str(text), "--output",
                                           str(tmp_path / "." / "in.txt")], "is the input")
    assert text.read_text() == "AND GOD\n"
    books = tmp_path / "books"
    books.mkdir()
    (books / "b.txt").write_text("It was a dark night. The end came.\n")
    for out in (books / "train.txt", books / "b.txt"):
        expect_exit_2(capsys, prep_cli.main, ["--books", str(books), "--out", str(out)], "slm-prepare-lm-text",
                      str(out))
    assert sorted(p.name for p in books.iterdir()) == ["b.txt"]
    dev = tmp_path / "dev.trn"
    dev.write_text("THE END CAME (s-u1)\n")
    expect_exit_2(capsys, prep_cli.main, ["--books", str(books / "b.txt"), "--exclude", str(dev), "--out",
                                          str(tmp_path / "lm" / "train.txt"), "--valid-out", str(dev)],
                  "dev.trn: is the input")
    assert dev.read_text() == "THE END CAME (s-u1)\n"
    from slm_lm.espnet_lm.data import write_espnet_text

    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "text").write_text("AND GOD\n")
    with pytest.raises(InputError, match="dump/text: is the input"):
        write_espnet_text(tmp_path / "dump" / "text", tmp_path / "dump", model_dir / "bpe.model")
    assert (tmp_path / "dump" / "text").read_text() == "AND GOD\n"


def test_wer_and_lm_see_the_same_normalised_text(model_dir, tmp_path, capsys):
    dev, dev_ref = write_nbest(tmp_path, "dev", HYPS, REFS)
    lower = {u: [(t.lower() + ".", s) for t, s in h] for u, h in HYPS.items()}
    low, _ = write_nbest(tmp_path, "low", lower, REFS)
    runs = []
    for path in (dev, low):
        rescore_cli.main(["--dev", str(path), "--dev-ref", str(dev_ref), "--lm", str(model_dir), "--out",
                          str(tmp_path / path.stem), "--no-progress"])
        runs.append(json.loads((tmp_path / path.stem / "tuning.json").read_text())["sets"][0])
    assert runs[0]["wer_am"] == runs[1]["wer_am"] == pytest.approx(25.0)  # 3 deletions in 12 words
    cyrillic = {"u1": [("Бог увидел свет", -0.5), *HYPS["u1"]], "u2": HYPS["u2"]}
    cyr, _ = write_nbest(tmp_path, "cyr", cyrillic, REFS)
    expect_exit_2(capsys, rescore_cli.main, ["--dev", str(cyr), "--dev-ref", str(dev_ref), "--lm", str(model_dir),
                                             "--out", str(tmp_path / "c")],
                  "cyr.tsv:1: hypothesis normalises to nothing (1 of 5 in set cyr)", "--no-normalize")


def test_byte_order_mark_and_crlf_are_stripped(tmp_path):
    dev, _ = write_nbest(tmp_path, "dev", HYPS, REFS)
    trn = tmp_path / "ref.trn"
    trn.write_text("\ufeffAND GOD SAW THE LIGHT (spk-u1)\nTHE EARTH WAS WITHOUT FORM AND VOID (spk-u2)\n")
    assert load_nbest(dev, trn).refs["u1"] == "AND GOD SAW THE LIGHT"
    tsv = tmp_path / "bom.tsv"
    tsv.write_text("\ufeff" + dev.read_text())
    assert load_nbest(tsv, trn).hyps["u1"][0].text == "AND GOD SAW THE LIGHT"
    crlf = tmp_path / "crlf.tsv"
    crlf.write_bytes(dev.read_bytes().replace(b"\n", b"\r\n"))
    trn.write_bytes(trn.read_bytes().replace(b"\n", b"\r\n"))
    assert load_nbest(crlf, trn).hyps == load_nbest(dev, trn).hyps and load_nbest(crlf, trn).refs["u2"].endswith("VOID")
    book = tmp_path / "book.txt"
    book.write_text("\ufeffChapter one.\n")
    assert next(read_text_lines(book)) == (1, "Chapter one.")


def test_byte_order_mark_is_stripped_by_slm_score_and_the_tokenizer(model_dir, tmp_path, capsys):
    model = copy_model(model_dir, tmp_path)
    tokens = model / "tokens.txt"
    tokens.write_text("\ufeff" + tokens.read_text())
    for text in ("AND GOD\n", "\ufeffAND GOD\n"):
        (tmp_path / "in.txt").write_text(text)
        score_cli.main(["--model", str(model), "--input", str(tmp_path / "in.txt"), "--no-normalize"])
    first, second = capsys.readouterr().out.splitlines()
    assert first == second


def test_cache_key_covers_dtype_and_tokenizer_and_rejects_bad_values(model_dir, tmp_path):
    base = load_scorer(str(model_dir))
    assert load_scorer(str(model_dir), dtype="bfloat16").name != base.name
    other = copy_model(model_dir, tmp_path)
    (tmp_path / "t.txt").write_text(TEXT.lower().upper().replace("FOX", "FOXES") * 30)
    tok = train_bpe(tmp_path / "t.txt", tmp_path / "bpe", vocab_size=40)
    assert tok.vocab_size == base.tokenizer.vocab_size and tok.token_list != base.tokenizer.token_list
    tok.save(other)
    config = json.loads((other / "config.json").read_text())
    del config["tokenizer_digest"]  # a folder saved before config.json recorded its tokenizer (else refused)
    (other / "config.json").write_text(json.dumps(config))
    assert load_scorer(str(other)).name != base.name  # same weights, another tokenizer
    cache = LMScoreCache(tmp_path / "cache", base.name)
    cache.path.parent.mkdir()
    cache.path.write_text(json.dumps({"model": base.name}) + '\n["AND GOD", NaN]\n')
    with pytest.raises(InputError, match=r"jsonl:2: corrupt LM score cache: want \[text, finite score\]"):
        lm_scores(base, ["AND GOD"], tmp_path / "cache", progress=False)


def test_slm_score_streams_in_chunks_with_a_summary(model_dir, tmp_path, capsys, monkeypatch):
    lines = [" ".join(TEXT.split()[i: i + 1 + i % 4]) for i in range(23)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    argv = ["--model", str(model_dir), "--input", str(tmp_path / "in.txt"), "--tokens"]
    score_cli.main(argv)
    whole = capsys.readouterr()
    monkeypatch.setattr(score_cli, "CHUNK", 5)
    score_cli.main(argv)
    chunked = capsys.readouterr()
    assert chunked.out == whole.out and len(chunked.out.splitlines()) == 23
    assert "slm-score: scored 23 sentences" in chunked.err
    (tmp_path / "bad.txt").write_text("\n".join(lines[:7] + ["AND GOD Ω"]) + "\n")
    expect_exit_2(capsys, score_cli.main, ["--model", str(model_dir), "--input", str(tmp_path / "bad.txt"),
                                           "--no-normalize"], "bad.txt:8: sentence 7: unknown character")


CACHE_WORKER = """
import sys, time
from slm_lm.scoring.cache import lm_scores
class Slow:
    name = "slow"
    def score(self, texts):
        time.sleep(float(sys.argv[3]))
        return [-float(len(t)) for t in texts]
lm_scores(Slow(), [f"{sys.argv[2]}{i}" for i in range(40)], sys.argv[1], chunk_size=2, progress=False)
"""


def _worker(tmp_path, prefix, delay):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[1])}
    return subprocess.Popen([sys.executable, "-c", CACHE_WORKER, str(tmp_path / "cache"), prefix, str(delay)], env=env)


def test_concurrent_runs_share_a_cache_and_a_sigkilled_run_resumes(tmp_path):
    import signal
    import time

    runs = [_worker(tmp_path, prefix, 0.0) for prefix in ("A", "B")]
    assert [r.wait(timeout=120) for r in runs] == [0, 0]
    cache = LMScoreCache(tmp_path / "cache", "slow")
    assert len(cache.scores) == 80  # no entry lost between the two writers
    killed = _worker(tmp_path, "C", 0.2)
    deadline = time.time() + 60
    while len(LMScoreCache(tmp_path / "cache", "slow").scores) < 84 and time.time() < deadline:
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    with open(cache.path, "ab") as f:  # as if killed in the middle of a write
        f.write(b'["C99", -3.')
    saved = LMScoreCache(tmp_path / "cache", "slow").scores
    done = {t for t in saved if t.startswith("C")}
    assert 4 <= len(done) < 40

    class Counting:
        name, calls = "slow", []

        def score(self, texts):
            self.calls.extend(texts)
            return [-float(len(t)) for t in texts]

    lm = Counting()
    scores = lm_scores(lm, [f"C{i}" for i in range(40)], tmp_path / "cache", chunk_size=2, progress=False)
    assert set(lm.calls) == {f"C{i}" for i in range(40)} - done and scores["C7"] == -2.0
    assert len(LMScoreCache(tmp_path / "cache", "slow").scores) == 120
    before = cache.path.read_bytes()
    cache.add({"D1": -1.0})  # append-only: what was there stays byte for byte
    assert cache.path.read_bytes() == before + b'["D1", -1.0]\n'


def test_a_failure_while_writing_outputs_leaves_the_previous_run_untouched(model_dir, tmp_path, monkeypatch):
    import slm_lm.rescoring.report as rescore_report

    dev, dev_ref = write_nbest(tmp_path, "dev", HYPS, REFS)
    out = tmp_path / "out"
    argv = ["--dev", str(dev), "--dev-ref", str(dev_ref), "--lm", str(model_dir), "--out", str(out), "--no-progress"]
    rescore_cli.main(argv)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def broken_plot(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(rescore_report, "plot_dev_wer", broken_plot)
    with pytest.raises(CommandError, match=r"cannot write the outputs \(disk full\); it is as it was"):
        rescore_cli.main(argv + ["--lambda-range", "0:2:1"])  # RESULTS.md is written before the plot
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.ref", "dev.tsv", "out"]


def test_normalising_the_shared_dev_other_lists_changes_wer_as_the_readme_says():
    """README: the normaliser changes 33 of 28,640 dev_other hypotheses and 1 reference (word-final
    apostrophes); AM-only / oracle WER 4.02 / 2.01 raw, 4.01 / 2.00 normalised."""
    from pathlib import Path

    from slm_lm.rescoring.nbest import normalize_nbest
    from slm_lm.rescoring.report import set_report
    from slm_lm.rescoring.scored_set import build_scored_set, parse_am_weights
    from slm_lm.rescoring.weight_search import Weights
    from slm_lm.data.text_norm import normalize_librispeech

    raw = load_nbest(MIRROR / "librispeech_nbest/dev_other", nbest=10)
    norm, emptied = normalize_nbest(raw, normalize_librispeech)
    changed = sum(a.text != b.text for u in raw.hyps for a, b in zip(raw.hyps[u], norm.hyps[u]))
    assert (changed, raw.n_hyps, sum(raw.refs[u] != norm.refs[u] for u in raw.refs), emptied) == (33, 28640, 1, [])
    am = parse_am_weights("decoder=0.6,ctc=0.4")
    wers = [set_report(build_scored_set(s, [], am), Weights(()), "dev") for s in (raw, norm)]
    assert [(round(r.wer_am, 2), round(r.wer_oracle, 2)) for r in wers] == [(4.02, 2.01), (4.01, 2.00)]
