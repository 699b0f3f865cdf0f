"""Bad input: every case runs the command as a user would (a process of its own, fresh or forked from a server
that has imported torch and ESPnet's third-party modules) and expects exit status 2, one stderr line
`<command>: error: <file>[:<line>]: <problem>`, no traceback, and every input file as it was."""
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

import slm_lm
from fork_server import forked, started
from slm_lm.model.config import LMConfig

ROOT = Path(__file__).resolve().parents[1]
SLM_BOOKS = Path(slm_lm.__file__).resolve().parent / "pretrained" / "slm-books"
DECODE_NBEST = ROOT / "egs" / "librispeech_slm" / "local" / "decode_nbest.py"
TEXT = "AND GOD SAW THE LIGHT\nTHE EARTH WAS WITHOUT FORM AND VOID\nIT'S A QUICK BROWN FOX\n"


def environment() -> dict:
    """The commands' environment: this checkout's slm_lm first on the import path."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def run(*argv, cwd=None, text=True):
    """Run a command in a fresh interpreter (`text=False`: stderr as bytes, with the carriage returns that text
    mode turns into line ends)."""
    return subprocess.run([str(a) for a in argv], capture_output=True, text=text, env=environment(), cwd=cwd,
                          timeout=600)


# The third-party modules that the commands import (torch, ESPnet's), imported once by a fork server: `cli`
# runs `python -m slm_lm.bin.MODULE` in a child of it, with slm_lm and ESPnet imported afresh.
SERVER = {"modules": ["torch", "numpy", "sentencepiece", "soundfile", "yaml", "espnet2.bin.asr_inference",
                      "espnet2.bin.lm_train"]}


@pytest.fixture(scope="module", autouse=True)
def fork_server():
    with started(sys.executable, SERVER["modules"], environment()) as server:
        SERVER["socket"] = server.socket
        yield
        del SERVER["socket"]


def cli(module, *args) -> subprocess.CompletedProcess:
    """`python -m slm_lm.bin.MODULE ARGS` as a child of the fork server, its output as text. (Tests of what a
    command prints while it starts run it fresh: `run(sys.executable, "-m", ...)`.)"""
    argv = ["-m", f"slm_lm.bin.{module}", *map(str, args)]
    with open(os.devnull) as null, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        status = forked(SERVER["socket"], argv, fds=(null.fileno(), out.fileno(), err.fileno()), timeout=600)
        printed = []
        for stream in (out, err):
            stream.seek(0)
            printed.append(io.TextIOWrapper(stream, newline=None).read())  # as text mode reads a pipe
    return subprocess.CompletedProcess([sys.executable, *argv], status, *printed)


def snapshot(*paths) -> dict:
    """{file: bytes} of every file at or under `paths` (to check that a command left its inputs alone)."""
    files = {}
    for path in map(Path, paths):
        for f in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            files[f] = f.read_bytes()
    return files


def expect_error(result, command, *needles) -> str:
    """Exit status 2 and one stderr line `command: error: ...` holding every needle, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[0].startswith(f"{command}: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# slm-train-bpe: --out never replaces the training text

def test_train_bpe_refuses_an_out_whose_tokens_txt_is_the_training_text(tmp_path):
    text = tmp_path / "tokens.txt"
    text.write_text(TEXT * 30)
    before = snapshot(tmp_path)
    result = cli("train_bpe", "--text", text, "--vocab-size", "40", "--out", tmp_path)
    expect_error(result, "slm-train-bpe", str(text), "tokens.txt", "replace")
    assert snapshot(tmp_path) == before


def test_train_bpe_refuses_an_out_that_is_the_training_text(tmp_path):
    text = tmp_path / "train.txt"
    text.write_text(TEXT * 30)
    before = snapshot(tmp_path)
    result = cli("train_bpe", "--text", text, "--vocab-size", "40", "--out", text)
    expect_error(result, "slm-train-bpe", str(text), "not a directory")
    assert snapshot(tmp_path) == before


# Model configs: kinds, types, ranges and sizes checked before anything is allocated

@pytest.mark.parametrize("key,value,needles", [
    ("max_positions", 100_000, ["max_positions=100000", "65,536", "ceiling"]),
    ("max_positions", 2e7, ["max_positions must be an integer", "20000000.0"]),
    ("n_layers", "4", ["n_layers must be an integer", "'4'"]),
    ("d_ff", -768, ["d_ff=-768", "ceiling"]),
    ("layer_norm_eps", 0, ["layer_norm_eps must be in (0,"]),
    ("layer_norm_eps", -1e-5, ["layer_norm_eps must be in (0,"]),
    ("n_heads", 5, ["not divisible by n_heads=5"]),
])
def test_slm_score_rejects_a_bad_model_config_in_one_line(tmp_path, key, value, needles):
    model = shutil.copytree(SLM_BOOKS, tmp_path / "model")
    config = json.loads((model / "config.json").read_text())
    config["model"][key] = value
    (model / "config.json").write_text(json.dumps(config))
    (tmp_path / "in.txt").write_text(TEXT)
    before = snapshot(model, tmp_path / "in.txt")
    result = cli("score", "--model", model, "--input", tmp_path / "in.txt", "--output", tmp_path / "out.tsv")
    expect_error(result, "slm-score", f"{model / 'config.json'}: bad model config", *needles)
    assert snapshot(model, tmp_path / "in.txt") == before
    assert not (tmp_path / "out.tsv").exists()


def test_a_config_of_20_million_positions_is_refused_before_it_is_built():
    """20M positions x 192 would allocate 15 GB in the position embedding; the config alone refuses it."""
    config = json.loads((SLM_BOOKS / "config.json").read_text())["model"]
    for key, value in [("max_positions", 20_000_000), ("vocab_size", 2_000_000), ("n_layers", True)]:
        with pytest.raises(ValueError, match=key):
            LMConfig.from_dict({**config, key: value})
    with pytest.raises(ValueError, match="parameters, above the ceiling"):
        LMConfig.from_dict({**config, "vocab_size": 500_000, "d_model": 4096, "n_heads": 4})


# --device: one check for every command's option

def device_argv(command, tmp_path, device):
    (tmp_path / "in.txt").write_text(TEXT)
    out = tmp_path / "out"
    return {
        "score": ["--model", "slm-books", "--input", tmp_path / "in.txt", "--output", out, "--device", device],
        "blimp": ["--model", "slm-books", "--data", tmp_path, "--out", out, "--device", device],
        "rescore": ["--dev", tmp_path / "in.txt", "--lm", "slm-books", "--out", out, "--device", device],
        "pretrain": ["train", "--kind", "slm", "--data", tmp_path, "--out", out, "--updates", "1", "--device", device],
    }[command]


@pytest.mark.parametrize("device", ["cuda", "foo"])
@pytest.mark.parametrize("command", ["score", "blimp", "rescore", "pretrain"])
def test_a_device_this_machine_lacks_is_one_line(tmp_path, command, device):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    argv = device_argv(command, tmp_path, device)
    before = snapshot(tmp_path)
    result = cli(command, *argv)
    problem = "CUDA is not available" if device == "cuda" else "not a device"
    expect_error(result, f"slm-{command}", f"--device {device}: {problem}")
    assert snapshot(tmp_path) == before


# slm-blimp: sentences that normalise to nothing, fields of the wrong type

def blimp_record(**changes):
    record = {"sentence_good": "Katherine can't help herself.", "sentence_bad": "Katherine can't help himself.",
              "field": "morphology", "linguistics_term": "anaphor_agreement", "UID": "anaphor_gender_agreement",
              "pairID": "0"}
    return json.dumps({**record, **changes})


@pytest.mark.parametrize("changes,needles", [
    ({"sentence_bad": "!!! ... ?"}, ["sentence_bad", "normalises to nothing"]),
    ({"field": ["morphology"]}, ["field must be a string, got list"]),
    ({"linguistics_term": {"a": 1}}, ["linguistics_term must be a string, got dict"]),
])
def test_slm_blimp_bad_pairs_name_file_and_line(tmp_path, changes, needles):
    data = tmp_path / "blimp"
    data.mkdir()
    paradigm = data / "anaphor_gender_agreement.jsonl"
    paradigm.write_text(blimp_record() + "\n" + blimp_record(pairID="1", **changes) + "\n")
    before = snapshot(data)
    result = cli("blimp", "--model", "slm-books", "--data", data, "--out", tmp_path / "out", "--no-progress")
    expect_error(result, "slm-blimp", f"{paradigm}:2: ", *needles)
    assert snapshot(data) == before
    assert not (tmp_path / "out" / "blimp_results.json").exists()


# decode_nbest.py --merge: every shard complete before anything is written

def decoded_shards(tmp_path, uttids=("u1", "u2", "u3", "u4")):
    """A data directory and two decoded shards of it, each with 1best and 2best files."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "wav.scp").write_text("".join(f"{u} /dev/null\n" for u in uttids))
    (data / "text").write_text("".join(f"{u} HELLO WORLD\n" for u in uttids))
    out = tmp_path / "decode"
    for job, shard in enumerate((uttids[:2], uttids[2:]), 1):
        for k in (1, 2):
            d = out / "logdir" / f"output.{job}" / f"{k}best_recog"
            d.mkdir(parents=True)
            values = {"text": "HELLO WORLD", "token": "▁HELLO ▁WORLD", "token_int": "5 6", "score": f"-{k}.5",
                      "scores": json.dumps({"decoder": -1.0 * k, "ctc": -0.5, "length_bonus": 3.0})}
            for name, value in values.items():
                (d / name).write_text("".join(f"{u} {value}\n" for u in shard))
    return data, out


@pytest.mark.parametrize("rank,name", [(2, "score"), (1, "scores")])
def test_merge_names_the_shard_missing_a_file_and_writes_nothing(tmp_path, rank, name):
    data, out = decoded_shards(tmp_path)
    (out / "logdir" / "output.2" / f"{rank}best_recog" / name).unlink()
    before = snapshot(tmp_path)
    result = run(sys.executable, DECODE_NBEST, "--merge", "2", "--data", data, "--out", out)
    expect_error(result, "decode_nbest.py", f"{out / 'logdir' / 'output.2' / f'{rank}best_recog' / name}: missing",
                 f"shard {out / 'logdir' / 'output.2'}")
    assert snapshot(tmp_path) == before
    assert not (out / "1best_recog").exists() and not (out / "2best_recog").exists()


def test_merge_of_complete_shards_writes_every_rank(tmp_path):
    data, out = decoded_shards(tmp_path)
    result = run(sys.executable, DECODE_NBEST, "--merge", "2", "--data", data, "--out", out)
    assert result.returncode == 0, result.stderr
    for k in (1, 2):
        for name in ("text", "token", "token_int", "score", "scores"):
            assert [line.split()[0] for line in (out / f"{k}best_recog" / name).read_text().splitlines()] == \
                ["u1", "u2", "u3", "u4"]


def test_slm_blimp_out_that_is_a_file(tmp_path):
    data = tmp_path / "blimp"
    data.mkdir()
    (data / "anaphor_gender_agreement.jsonl").write_text(blimp_record() + "\n")
    out = tmp_path / "out"
    out.write_text("my notes\n")
    result = cli("blimp", "--model", "slm-books", "--data", data, "--out", out, "--no-progress")
    expect_error(result, "slm-blimp", f"--out {out}: is a file, not a directory")
    assert out.read_text() == "my notes\n"


def test_a_multi_line_parser_message_is_one_line(tmp_path):
    """A YAML tag in an ESPnet LM config: the parser's message spans lines; the error stays one."""
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "config.yaml").write_text("lm: !!python/name:os.system\nlm_conf: {size: tiny}\n")
    (exp / "valid.loss.ave.pth").write_bytes(b"")
    (tmp_path / "in.txt").write_text(TEXT)
    before = snapshot(tmp_path)
    result = cli("score", "--model", exp, "--input", tmp_path / "in.txt")
    expect_error(result, "slm-score", f"{exp / 'config.yaml'}:1: could not determine a constructor for the tag",
                 "(cannot read the ESPnet config)")
    assert snapshot(tmp_path) == before


# Model folders: the score cache, the tokenizer, init-slm's --out, slm-score's --output, refused pickles

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A saved tiny SLM (d_model 64, 4 heads, random weights) with its own 40-token tokenizer."""
    from slm_lm import build_lm
    from slm_lm.model.bpe import train_bpe
    from slm_lm.scoring.scorer import Scorer

    d = tmp_path_factory.mktemp("tiny")
    (d / "text.txt").write_text(TEXT * 30)
    tokenizer = train_bpe(d / "text.txt", d / "bpe", vocab_size=40)
    torch.manual_seed(0)
    model = build_lm("slm", tokenizer.vocab_size, size="tiny", max_positions=48)
    with torch.no_grad():  # weights far from their initial ones: attention is not near uniform, heads matter
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 0.3)
    Scorer(model, tokenizer).save_pretrained(d / "slm")
    return d / "slm"


def write_nbest(directory):
    """An N-best list (uttid, rank, AM score, text) and its references."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "dev.tsv").write_text("u1\t1\t-1.0\tAND GOD SAW THE LIGHT\nu1\t2\t-1.5\tAND GOD SAW THE NIGHT\n"
                                       "u2\t1\t-2.0\tTHE EARTH WAS VOID\nu2\t2\t-2.1\tTHE EARTH WAS WITHOUT FORM\n")
    (directory / "dev.ref").write_text("u1 AND GOD SAW THE LIGHT\nu2 THE EARTH WAS WITHOUT FORM\n")
    return directory / "dev.tsv", directory / "dev.ref"


@pytest.mark.parametrize("key,value", [("n_heads", 2), ("layer_norm_eps", 0.05)])
def test_a_shared_cache_does_not_give_an_edited_copy_the_originals_scores(tiny_model, tmp_path, key, value):
    """Issue 32: after editing n_heads (or layer_norm_eps) in a copy, a run sharing --cache with the original
    scored the copy with the original's cached scores."""
    copy = shutil.copytree(tiny_model, tmp_path / "copy")
    config = json.loads((copy / "config.json").read_text())
    config["model"][key] = value
    (copy / "config.json").write_text(json.dumps(config))
    dev, ref = write_nbest(tmp_path / "nb")
    cache = tmp_path / "cache"
    for lm, out in ((tiny_model, "out_a"), (copy, "out_b")):
        result = cli("rescore", "--dev", dev, "--dev-ref", ref, "--lm", lm, "--cache", cache, "--out",
                     tmp_path / out, "--no-progress")
        assert result.returncode == 0, result.stderr[-2000:]
    files = sorted(cache.glob("*.jsonl"))
    assert len(files) == 2, files  # one cache per model: the copy's key differs
    scores = [dict(json.loads(line) for line in f.read_text().splitlines()[1:]) for f in files]
    assert scores[0].keys() == scores[1].keys()
    assert max(abs(scores[0][t] - scores[1][t]) for t in scores[0]) > 1e-3, scores
    from slm_lm.scoring.scorer import load_scorer

    for spec in (tiny_model, copy):  # each model's cache holds its own scores
        scorer = load_scorer(str(spec))
        cached = next(s for f, s in zip(files, scores) if json.loads(f.read_text().splitlines()[0])["model"] ==
                      scorer.name)
        assert list(cached.values()) == pytest.approx(scorer.score(list(cached)), abs=1e-4)


def test_a_model_folder_with_another_tokenizer_of_the_same_size_is_refused(tiny_model, tmp_path):
    d = tmp_path / "other"
    d.mkdir()
    (d / "text.txt").write_text("ZEBRA QUARTZ VEX JUMPS OVER LAZY DOGS\nPACK MY BOX WITH FIVE DOZEN LIQUOR JUGS\n" * 30)
    assert cli("train_bpe", "--text", d / "text.txt", "--vocab-size", "40", "--out", d / "bpe").returncode == 0
    model = shutil.copytree(tiny_model, tmp_path / "model")
    for name in ("bpe.model", "tokens.txt"):
        shutil.copy(d / "bpe" / name, model / name)
    (tmp_path / "in.txt").write_text("PACK MY BOX\n")
    before = snapshot(tmp_path)
    result = cli("score", "--model", model, "--input", tmp_path / "in.txt", "--output", tmp_path / "out.tsv")
    expect_error(result, "slm-score", f"{model}: the tokenizer (bpe.model, tokens.txt) is not the one this model "
                 "was saved with")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("where", ["same", "inside", "contains", "link"])
def test_init_slm_refuses_an_out_that_is_contains_or_is_inside_its_source(tiny_model, tmp_path, where):
    """Issue 32: `slm-init-slm --from D --out D` overwrote the source model."""
    source = shutil.copytree(tiny_model, tmp_path / "models" / "src")
    out = {"same": source, "inside": source / "sub", "contains": tmp_path / "models", "link": tmp_path / "ln"}[where]
    if where == "link":
        out.symlink_to(source)
    before = snapshot(tmp_path / "models")
    result = cli("init_slm", "--from", source, "--out", out, "--kind", "slm")
    how = {"same": "is", "inside": "is inside", "contains": "contains", "link": "is"}[where]
    expect_error(result, "slm-init-slm", f"--out {out}: {how} the input {source}")
    assert snapshot(tmp_path / "models") == before
    assert not (source / "sub").exists()


@pytest.mark.parametrize("under", [False, True])
def test_init_slm_out_that_is_a_file_or_under_one(tiny_model, tmp_path, under):
    notes = tmp_path / "notes"
    notes.write_text("mine\n")
    out = notes / "model" if under else notes
    result = cli("init_slm", "--from", tiny_model, "--out", out, "--kind", "slm")
    expect_error(result, "slm-init-slm", f"--out {out}: ", "is a file, not a directory")
    assert notes.read_text() == "mine\n"


def test_slm_score_output_under_a_file_is_one_line(tiny_model, tmp_path):
    (tmp_path / "in.txt").write_text(TEXT)
    (tmp_path / "afile").write_text("mine\n")
    before = snapshot(tmp_path)
    out = tmp_path / "afile" / "out.tsv"
    result = cli("score", "--model", tiny_model, "--input", tmp_path / "in.txt", "--output", out)
    expect_error(result, "slm-score", f"--output {out}: cannot write: {tmp_path / 'afile'} is a file")
    assert snapshot(tmp_path) == before


def test_slm_score_output_it_cannot_write_is_one_line(tiny_model, tmp_path):
    """A directory the output cannot be created in (simulated: tests may run as root, who writes anywhere)."""
    (tmp_path / "in.txt").write_text(TEXT)
    out = tmp_path / "ro" / "out.tsv"
    out.parent.mkdir()
    code = ("import sys, tempfile\n"
            "def refuse(*a, **k):\n"
            "    raise PermissionError(13, 'Permission denied', k.get('dir'))\n"
            "tempfile.mkstemp = refuse\n"
            "from slm_lm.bin import score\n"
            "score.main(sys.argv[1:])\n")
    result = run(sys.executable, "-c", code, "--model", tiny_model, "--input", tmp_path / "in.txt", "--output", out)
    expect_error(result, "slm-score", f"{out}: cannot write the output: Permission denied")
    assert not out.exists()


def test_a_refused_pickle_in_model_pt_is_one_line(tiny_model, tmp_path):
    """torch's warning about the pickle protocol no longer comes before the refusal."""
    import pickle

    model = shutil.copytree(tiny_model, tmp_path / "model")
    (model / "model.pt").write_bytes(pickle.dumps({"x": os.getcwd}, protocol=4))
    (tmp_path / "in.txt").write_text(TEXT)
    result = cli("score", "--model", model, "--input", tmp_path / "in.txt")
    expect_error(result, "slm-score", f"{model / 'model.pt'}: refused to unpickle objects other than tensors")


# slm-prepare-lm-text: corrupt resumable state, --out under a file

@pytest.mark.parametrize("content", [b"{corrupt", b"\xff\xfe", b'{"key": {}, "stats": []}', b"[1, 2]"])
def test_prepare_lm_text_corrupt_part_json_is_one_line_naming_it(tmp_path, content):
    (tmp_path / "in.txt").write_text(TEXT)
    out = tmp_path / "prep" / "train.txt"
    first = cli("prepare_lm_text", "--books", tmp_path / "in.txt", "--normalized", "--out", out, "--keep-parts")
    assert first.returncode == 0, first.stderr[-2000:]
    meta = out.with_name("train.txt.parts") / "000000.json"
    meta.write_bytes(content)
    before = snapshot(tmp_path)
    result = cli("prepare_lm_text", "--books", tmp_path / "in.txt", "--normalized", "--out", out)
    expect_error(result, "slm-prepare-lm-text", f"{meta}", "corrupt saved state of an earlier run", "delete it")
    assert snapshot(tmp_path) == before
    meta.unlink()
    again = cli("prepare_lm_text", "--books", tmp_path / "in.txt", "--normalized", "--out", out)
    assert again.returncode == 0, again.stderr[-2000:]


def test_prepare_lm_text_out_under_a_file_is_one_line(tmp_path):
    (tmp_path / "in.txt").write_text(TEXT)
    (tmp_path / "afile").write_text("mine\n")
    before = snapshot(tmp_path)
    out = tmp_path / "afile" / "t.txt"
    result = cli("prepare_lm_text", "--books", tmp_path / "in.txt", "--normalized", "--out", out)
    expect_error(result, "slm-prepare-lm-text", f"{out}: cannot write: {tmp_path / 'afile'} is a file")
    assert snapshot(tmp_path) == before


# slm-pretrain: checkpoints of another run, one writer per --out, corpora and options it cannot use

PRETRAIN_TINY = ["--n-layers", "1", "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--max-positions", "32",
                 "--batch-tokens", "128", "--threads", "1", "--valid-every", "1000"]


@pytest.fixture(scope="module")
def pretrain_data(tmp_path_factory):
    """DATA (a 40-piece tokenizer, train and valid corpora with their records) and a finished 2-update SLM run."""
    from slm_lm.model.bpe import train_bpe
    from slm_lm.pretrain import encode_corpus

    d = tmp_path_factory.mktemp("pretrain")
    (d / "text.txt").write_text(TEXT * 30)
    tokenizer = train_bpe(d / "text.txt", d / "data", vocab_size=40)
    for name in ("train", "valid"):
        encode_corpus(d / "text.txt", tokenizer, d / "data" / f"{name}.ids.xz")
    result = cli("pretrain", "train", "--kind", "slm", "--data", d / "data", "--out", d / "run", "--updates", "2",
                 *PRETRAIN_TINY)
    assert result.returncode == 0, result.stderr[-3000:]
    return d / "data", d / "run"


def pretrain_argv(data, out, *changes, kind="slm"):
    """`train` arguments of the fixture's run, with `changes` (option, value pairs) replacing its values."""
    options = dict(zip(PRETRAIN_TINY[::2], PRETRAIN_TINY[1::2]))
    budget = {"--updates": "2"}
    for option, value in zip(changes[::2], changes[1::2]):
        if option in ("--minutes", "--updates"):
            budget = {option: value}
        else:
            options[option] = value
    return ["train", "--kind", kind, "--data", data, "--out", out,
            *[x for pair in {**budget, **options}.items() for x in pair]]


def test_pretrain_refuses_an_out_whose_model_is_of_no_run_there(tmp_path, pretrain_data, capsys):
    """An --out holding a model/ but no checkpoint: the user's directory, which the first validation's export
    would replace; refused before training (in process: an escaping error fails the test)."""
    from slm_lm.bin import pretrain as pretrain_cli

    out = tmp_path / "run"
    (out / "model").mkdir(parents=True)
    (out / "model" / "config.json").write_text("mine\n")
    with pytest.raises(SystemExit) as stop:
        pretrain_cli.main([str(a) for a in pretrain_argv(pretrain_data[0], out)])
    line = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and line.startswith(f"slm-pretrain: error: {out / 'model'}: not written by"), line
    assert (out / "model" / "config.json").read_text() == "mine\n"
    assert not (out / "checkpoint.pt").exists()


@pytest.mark.parametrize("kind,changes,needles", [
    ("clm", [], ["a checkpoint of kind slm", "this run's --kind is clm"]),
    ("slm", ["--d-model", "64"], ["d_model=32 (this run: --d-model 64)"]),
    ("slm", ["--dropout", "0", "--n-layers", "2"], ["n_layers=1 (this run: --n-layers 2)",
                                                   "dropout=0.1 (this run: --dropout 0.0)"]),
    ("slm", ["--seed", "3"], ["seed=0 (this run: --seed 3)"]),
])
def test_pretrain_refuses_to_resume_a_checkpoint_of_another_run(tmp_path, pretrain_data, kind, changes, needles):
    data, run = pretrain_data
    out = shutil.copytree(run, tmp_path / "run")
    before = snapshot(out, data)
    result = cli("pretrain", *pretrain_argv(data, out, "--updates", "4", *changes, kind=kind))
    expect_error(result, "slm-pretrain", f"{out / 'checkpoint.pt'}: ", *needles)
    assert snapshot(out, data) == before


def test_a_second_pretrain_run_into_the_same_out_is_refused_at_once(tmp_path, pretrain_data):
    data, _ = pretrain_data
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    first = subprocess.Popen([sys.executable, "-m", "slm_lm.bin.pretrain",
                              *map(str, pretrain_argv(data, out, "--minutes", "10"))],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        lock = out / ".slm_lm.lock"
        for _ in range(600):  # the first run holds --out once its lock file names it
            if f"pid {first.pid} " in (lock.read_text() if lock.exists() else ""):
                break
            assert first.poll() is None, "the first run ended"
            time.sleep(0.1)
        else:
            pytest.fail("the first run never took its lock")
        result = cli("pretrain", *pretrain_argv(data, out, "--minutes", "10", "--seed", "1"))
        expect_error(result, "slm-pretrain", f"{out}: in use by slm-pretrain (pid {first.pid} ",
                     "one writer per output directory")
        assert first.poll() is None  # the first run goes on
    finally:
        first.terminate()
        first.wait(timeout=60)


def test_pretrain_encode_refuses_an_empty_or_missing_text(tmp_path, pretrain_data):
    data, _ = pretrain_data
    (tmp_path / "empty.txt").write_text("")
    before = snapshot(tmp_path, data)
    result = cli("pretrain", "encode", "--bpe-dir", data, "--text", tmp_path / "empty.txt",
                 "--out", tmp_path / "e.ids.xz")
    expect_error(result, "slm-pretrain", f"{tmp_path / 'empty.txt'}: no sentence to encode")
    result = cli("pretrain", "encode", "--bpe-dir", data, "--text", tmp_path / "missing.txt",
                 "--out", tmp_path / "m.ids.xz")
    expect_error(result, "slm-pretrain", f"{tmp_path / 'missing.txt'}: cannot open")
    assert snapshot(tmp_path, data) == before


@pytest.mark.parametrize("record", [True, False])
def test_pretrain_refuses_a_corpus_of_another_tokenizer(tmp_path, pretrain_data, record):
    """With its record (NAME.ids.json), a corpus of another tokenizer of the same size is refused by digest;
    without (an older corpus), one of a bigger vocabulary is refused by its token ids."""
    from slm_lm.model.bpe import train_bpe
    from slm_lm.pretrain import encode_corpus

    data, _ = pretrain_data
    if record:  # another tokenizer of the very same size
        (tmp_path / "other.txt").write_text("ZEBRA QUARTZ VEX JUMPS OVER LAZY DOGS\nPACK MY BOX WITH FIVE JUGS\n" * 30)
        other = train_bpe(tmp_path / "other.txt", tmp_path / "bpe", vocab_size=40)
        needles = ["encoded with another tokenizer", "valid.ids.json"]
    else:
        (tmp_path / "text.txt").write_text(TEXT * 30)
        other = train_bpe(tmp_path / "text.txt", tmp_path / "bpe", vocab_size=60)
        needles = ["token id", "beyond the vocabulary of 41"]
    mixed = tmp_path / "data"
    mixed.mkdir()
    for name in ("bpe.model", "tokens.txt"):
        shutil.copy(data / name, mixed / name)
    for name in ("train", "valid"):
        encode_corpus(tmp_path / ("other.txt" if record else "text.txt"), other, mixed / f"{name}.ids.xz")
        if not record:
            (mixed / f"{name}.ids.json").unlink()
    before = snapshot(mixed)
    result = cli("pretrain", *pretrain_argv(mixed, tmp_path / "out"))
    expect_error(result, "slm-pretrain", f"{mixed / 'valid.ids.xz'}: ", *needles)  # the first the loader reads
    assert snapshot(mixed) == before and not (tmp_path / "out" / "checkpoint.pt").exists()


@pytest.mark.parametrize("changes,needles", [
    (["--max-positions", "2"], ["--max-positions 2: too small for one piece between <s> and </s>"]),
    (["--minutes", "inf"], ["argument --minutes: inf: must be a finite number"]),
    (["--minutes", "nan"], ["argument --minutes: nan: must be a finite number"]),
    (["--threads", "-1"], ["argument --threads: -1: must be 1 or more"]),
    (["--threads", "0"], ["argument --threads: 0: must be 1 or more"]),
    (["--out-is-a-file"], ["is a file, not a directory"]),
])
def test_pretrain_options_it_cannot_use_are_one_line(tmp_path, pretrain_data, changes, needles):
    data, _ = pretrain_data
    out = tmp_path / "out"
    if changes == ["--out-is-a-file"]:
        out.write_text("my notes\n")
        changes = []
    before = snapshot(tmp_path, data)
    result = cli("pretrain", *pretrain_argv(data, out, *changes))
    expect_error(result, "slm-pretrain", *needles)
    assert snapshot(tmp_path, data) == before


# slm-rescore: --out holds only what it wrote; the user's entries are never moved, replaced or deleted

NBEST_HYPS = {"u1": [("AND GOD SAW THE LIGHT", -1.0), ("AND GOD SAW THE NIGHT", -1.5)],
              "u2": [("THE EARTH WAS VOID", -2.0), ("THE EARTH WAS WITHOUT FORM AND VOID", -2.1)]}
NBEST_REFS = {"u1": "AND GOD SAW THE LIGHT", "u2": "THE EARTH WAS WITHOUT FORM AND VOID"}


def nbest_tsv(folder, name="devset"):
    """An N-best TSV `<folder>/<name>.tsv` and its reference `<folder>/<name>.ref`."""
    folder.mkdir(parents=True, exist_ok=True)
    tsv, ref = folder / f"{name}.tsv", folder / f"{name}.ref"
    tsv.write_text("".join(f"{u}\t{r}\t{s}\t{t}\n" for u, h in NBEST_HYPS.items() for r, (t, s) in enumerate(h, 1)))
    ref.write_text("".join(f"{u} {t}\n" for u, t in NBEST_REFS.items()))
    return tsv, ref


def rescore_argv(tsv, ref, out, *extra):
    return ["--dev", tsv, "--dev-ref", ref, "--lm", "slm-books", "--out", out, "--lambda-range", "0:1:0.5",
            "--no-progress", *extra]


FAILING_RENAME = """
import os, sys
from pathlib import Path
from slm_lm.bin import rescore
real, failed = os.rename, []
def rename(src, dst, *args, **kwargs):  # moving a user's note, or the first move of a new tuning.json, fails
    src, dst = Path(src), Path(dst)
    if src.name == "b_note.txt" or (dst.name == "tuning.json" and dst.parent == Path(sys.argv[1]) and not failed):
        failed.append(src)
        raise PermissionError(13, "Permission denied", str(src))
    return real(src, dst, *args, **kwargs)
os.rename = rename
rescore.main(sys.argv[2:])
"""


def test_rescore_failing_to_replace_an_earlier_run_restores_out_and_never_touches_the_users_files(tmp_path):
    tsv, ref = nbest_tsv(tmp_path / "in")
    out = tmp_path / "out"
    assert cli("rescore", *rescore_argv(tsv, ref, out)).returncode == 0
    (out / "a_note.txt").write_text("mine 1")
    (out / "b_note.txt").write_text("mine 2")
    (out / "sub").mkdir()
    (out / "sub" / "c.txt").write_text("mine 3")
    before = snapshot(out)
    argv = rescore_argv(tsv, ref, out.resolve(), "--beta-range", "0,1")
    result = run(sys.executable, "-c", FAILING_RENAME, out.resolve(), *argv)
    expect_error(result, "slm-rescore", f"--out {out.resolve()}: cannot write the outputs", "as it was")
    assert snapshot(out) == before  # notes kept, the earlier run's outputs back in place
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["a_note.txt", "b_note.txt", "sub", "devset", "lm_cache", "RESULTS.md", "dev_wer_vs_lambda.png", "tuning.json"])


def test_rescore_refuses_an_out_holding_a_reference_file_or_the_cache(tmp_path):
    tsv, _ = nbest_tsv(tmp_path / "nb", "dev_clean")
    refs2 = tmp_path / "refs2"
    refs2.mkdir()
    ref = refs2 / "dev_clean"
    ref.write_text("".join(f"{u} {t}\n" for u, t in NBEST_REFS.items()))
    before = snapshot(tmp_path)
    result = cli("rescore", *rescore_argv(tsv, ref, refs2))
    expect_error(result, "slm-rescore", f"--out {refs2}: contains the input {ref}")
    assert snapshot(tmp_path) == before and ref.is_file()
    out = tmp_path / "out"
    for cache, needle in ((out, "is the cache or inside it"), (tmp_path, "is the cache or inside it"),
                          (out / "dev_clean" / "cache", "inside the output")):
        result = cli("rescore", *rescore_argv(tsv, ref, out, "--cache", cache))
        expect_error(result, "slm-rescore", f"--cache {cache}: ", needle)
    assert snapshot(tmp_path) == before and not out.exists()


def test_rescore_refuses_a_users_folder_named_like_a_set_or_an_output(tmp_path):
    tsv, ref = nbest_tsv(tmp_path / "in")
    out = tmp_path / "out"
    (out / "devset").mkdir(parents=True)
    (out / "devset" / "my_notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    result = cli("rescore", *rescore_argv(tsv, ref, out))
    expect_error(result, "slm-rescore", f"{out / 'devset'}: not written by slm-rescore")
    assert snapshot(tmp_path) == before
    (out / "devset" / "my_notes.txt").unlink()
    (out / "devset").rmdir()
    (out / "RESULTS.md").write_text("my results")
    result = cli("rescore", *rescore_argv(tsv, ref, out))
    expect_error(result, "slm-rescore", f"{out / 'RESULTS.md'}: not written by slm-rescore")
    assert (out / "RESULTS.md").read_text() == "my results"


@pytest.mark.parametrize("where,needle", [("afile", "is a file, not a directory"),
                                          ("afile/x/y", "a file, not a directory")])
def test_rescore_out_that_is_a_file_or_under_one(tmp_path, where, needle):
    tsv, ref = nbest_tsv(tmp_path / "in")
    (tmp_path / "afile").write_text("my notes\n")
    before = snapshot(tmp_path)
    result = cli("rescore", *rescore_argv(tsv, ref, tmp_path / where))
    expect_error(result, "slm-rescore", f"--out {tmp_path / where}: ", needle)
    assert snapshot(tmp_path) == before


def test_a_second_rescore_run_into_the_same_out_is_refused_at_once(tmp_path):
    from slm_lm.common.fileio import exclusive_dir_lock

    tsv, ref = nbest_tsv(tmp_path / "in")
    out = tmp_path / "out"
    with exclusive_dir_lock(out, "slm-rescore"):
        result = cli("rescore", *rescore_argv(tsv, ref, out))
    expect_error(result, "slm-rescore", f"{out}: in use by slm-rescore (pid {os.getpid()}", "one writer")
    assert sorted(p.name for p in out.iterdir()) == []


# Recipe helpers: score_wer.py and make_results.py never replace an input

RECIPE_LOCAL = ROOT / "egs" / "librispeech_slm" / "local"


def test_score_wer_refuses_one_directory_for_reference_and_hypotheses(tmp_path):
    d = tmp_path / "dev_clean"
    (d / "1best_recog").mkdir(parents=True)
    (d / "text").write_text("u1 AND GOD SAW THE LIGHT\n")
    (d / "1best_recog" / "text").write_text("u1 AND GOD SAW THE NIGHT\n")
    before = snapshot(tmp_path)
    result = run(sys.executable, RECIPE_LOCAL / "score_wer.py", "--data", d, d, cwd=RECIPE_LOCAL)
    expect_error(result, "score_wer.py", f"{d / 'text'}: would replace the input {d / 'text'}")
    assert snapshot(tmp_path) == before


def decoded_set(tmp_path):
    """data/dev_clean/text and decode/dev_clean/1best_recog/ of one utterance."""
    data = tmp_path / "data" / "dev_clean"
    data.mkdir(parents=True)
    (data / "text").write_text("u1 AND GOD SAW THE LIGHT\n")
    nb = tmp_path / "decode" / "dev_clean" / "1best_recog"
    nb.mkdir(parents=True)
    for name, value in (("text", "AND GOD SAW THE LIGHT"), ("score", "-1.0"),
                        ("scores", json.dumps({"decoder": -1.0, "ctc": -1.0}))):
        (nb / name).write_text(f"u1 {value}\n")
    return ["--decode-dir", tmp_path / "decode", "--data", tmp_path / "data", "--sets", "dev_clean", "--nbest", "1"]


@pytest.mark.parametrize("out,needle", [("data/dev_clean/text", "is the input"),
                                        ("decode/dev_clean/RESULTS.md", "is inside the input"),
                                        ("data", "is a directory, not a file"),
                                        ("data/dev_clean/text/x", "cannot write: {data}/dev_clean/text is a file")])
def test_make_results_refuses_an_out_that_replaces_an_input(tmp_path, out, needle):
    argv = decoded_set(tmp_path)
    before = snapshot(tmp_path)
    result = run(sys.executable, RECIPE_LOCAL / "make_results.py", *argv, "--out", tmp_path / out, cwd=RECIPE_LOCAL)
    expect_error(result, "make_results.py", f"--out {tmp_path / out}: {needle.format(data=tmp_path / 'data')}")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("tuning,needle", [(None, "missing"), ("{bad", "not a tuning.json"),
                                           ("{}", "not a tuning.json")])
def test_make_results_rescored_dir_without_a_tuning_json(tmp_path, tuning, needle):
    argv = decoded_set(tmp_path)
    rdir = tmp_path / "resc"
    (rdir / "dev_clean" / "1best_recog").mkdir(parents=True)
    (rdir / "dev_clean" / "1best_recog" / "text").write_text("u1 AND GOD SAW THE LIGHT\n")
    if tuning is not None:
        (rdir / "tuning.json").write_text(tuning)
    result = run(sys.executable, RECIPE_LOCAL / "make_results.py", *argv, "--rescored", f"x={rdir}",
                 "--out", tmp_path / "RESULTS.md", cwd=RECIPE_LOCAL)
    expect_error(result, "make_results.py", f"{rdir / 'tuning.json'}: {needle}")
    assert not (tmp_path / "RESULTS.md").exists()
    result = run(sys.executable, RECIPE_LOCAL / "make_results.py", *argv, "--rescored", str(rdir),
                 "--out", tmp_path / "RESULTS.md", cwd=RECIPE_LOCAL)
    expect_error(result, "make_results.py", f"--rescored {str(rdir)!r}: want NAME=PATH")


# slm-rescore: weights and grids are finite numbers, grids have at most 100,000 values

@pytest.mark.parametrize("option,value,needle", [
    ("--am-weights", "decoder=nan,ctc=0.3", "'decoder=nan': the weight is not a finite number"),
    ("--am-weights", "decoder=inf", "'decoder=inf': the weight is not a finite number"),
    ("--lambda-range", "nan", "'nan' holds a value that is not a finite number"),
    ("--lambda-range", "0,inf", "'0,inf' holds a value that is not a finite number"),
    ("--lambda-range", "0:inf:1", "'0:inf:1' holds a value that is not a finite number"),
    ("--lambda-range", "0:1e300:1e-300", "'0:1e300:1e-300' gives too many values, above the ceiling of 100,000"),
    ("--lambda-range", "0:10:0.00001", "'0:10:0.00001' gives 1,000,001 values, above the ceiling of 100,000"),
    ("--beta-range", "nan", "'nan' holds a value that is not a finite number"),
    ("--beta-range", "0:1:nan", "'0:1:nan' holds a value that is not a finite number"),
    ("--ln-alpha-range", "0,-inf", "'0,-inf' holds a value that is not a finite number"),
])
def test_rescore_refuses_non_finite_weights_and_huge_grids(tmp_path, option, value, needle):
    tsv, ref = nbest_tsv(tmp_path / "in")
    before = snapshot(tmp_path)
    result = cli("rescore", *rescore_argv(tsv, ref, tmp_path / "out", f"{option}={value}"))
    expect_error(result, "slm-rescore", f"{option}: {needle}")
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


# A path that is missing, of the wrong kind or cannot be written: the file and a plain reason, never `[Errno N]`

def wrong_path_case(case, tmp_path, tiny_model, pretrain_data):
    """(command module, its arguments, the program name, the needles of its message) of one case."""
    adir, afile, dangling = tmp_path / "adir", tmp_path / "afile", tmp_path / "dangling"
    adir.mkdir()
    afile.write_text(TEXT)
    dangling.symlink_to(tmp_path / "nowhere")
    tsv, ref = write_nbest(tmp_path / "nbest")
    text, out = tmp_path / "text.txt", tmp_path / "out"
    text.write_text(TEXT)
    rescore = ["--dev", tsv, "--dev-ref", ref, "--lm", tiny_model, "--no-progress", "--lambda-range", "0:1:0.5"]
    if case == "rescore --dev-ref DIR":
        return "rescore", [*rescore[:2], "--dev-ref", adir, *rescore[4:], "--out", out], \
            [f"{adir}: is a directory, not a file"]
    if case == "rescore --cache under /proc":  # scored, then the cache cannot be written (it was a traceback)
        return "rescore", [*rescore, "--cache", "/proc/slm_cache", "--out", out], ["/proc/slm_cache"]
    if case == "rescore-mt --dev DIR":
        return "rescore_mt", ["--dev", adir, "--dev-ref", ref, "--lm", tiny_model, "--out", out], \
            [f"{adir}: is a directory, not a file"]
    if case == "compare-wer --ref dangling link":
        return "compare_wer", ["--ref", dangling, "--hyp", f"A={ref}", "--hyp", f"B={ref}"], \
            [f"{dangling}: file not found (a link to {tmp_path / 'nowhere'}, which does not exist)"]
    if case == "train-bpe --text DIR":
        return "train_bpe", ["--text", adir, "--vocab-size", "40", "--out", out], \
            [f"{adir}: is a directory, not a file"]
    if case == "score --model FILE":
        return "score", ["--model", afile, "--input", text, "--output", out], [f"{afile}: is a file, not a directory"]
    if case == "average-models --model missing":
        return "average_models", ["--model", tmp_path / "missing", "--model", tiny_model, "--out", out], \
            [f"{tmp_path / 'missing'}: model directory not found"]
    if case == "average-models --out under /proc":
        return "average_models", ["--model", tiny_model, "--model", tiny_model, "--out", "/proc/slm_avg"], \
            ["--out /proc/slm_avg: cannot write"]
    if case == "average-models --out of a name over 255 bytes":
        return "average_models", ["--model", tiny_model, "--model", tiny_model, "--out", tmp_path / ("a" * 300)], \
            [f"{tmp_path / ('a' * 300)}: File name too long"]
    if case == "blimp paradigm that is a directory":
        (adir / "x.jsonl").mkdir()
        return "blimp", ["--model", tiny_model, "--data", adir, "--out", out], \
            [f"{adir / 'x.jsonl'}: is a directory, not a file"]
    if case == "zero-shot --out under a file":  # refused before scoring ("File exists" after it)
        data = tmp_path / "d.tsv"
        data.write_text("AND GOD SAW THE LIGHT\tLIGHT\nTHE EARTH WAS VOID\tVOID\n")
        return "zero_shot", ["--data", data, "--labels", "LIGHT,VOID", "--pattern", "{text} {label}",
                             "--model", tiny_model, "--out", afile / "x", "--no-progress"], \
            [f"--out {afile / 'x'}: cannot write: {afile} is a file, not a directory"]
    if case == "data get --dir under a file":
        return "data", ["get", "--mirror", adir, "--dir", afile / "x", "--no-progress", "blimp"], \
            [f"--dir {afile / 'x'}: cannot write: {afile} is a file, not a directory"]
    if case == "pretrain train checkpoint.pt that is a directory":
        (out / "checkpoint.pt").mkdir(parents=True)
        return "pretrain", pretrain_argv(pretrain_data[0], out), \
            [f"{out / 'checkpoint.pt'}: is a directory, not a file"]
    raise AssertionError(case)


@pytest.mark.parametrize("case", [
    "rescore --dev-ref DIR", "rescore --cache under /proc", "rescore-mt --dev DIR", "compare-wer --ref dangling link",
    "train-bpe --text DIR", "score --model FILE", "average-models --model missing", "average-models --out under /proc",
    "average-models --out of a name over 255 bytes", "blimp paradigm that is a directory",
    "zero-shot --out under a file", "data get --dir under a file", "pretrain train checkpoint.pt that is a directory"])
def test_a_wrong_path_is_named_with_a_plain_reason(tmp_path, tiny_model, pretrain_data, case):
    """The message names the file and says in plain words what is wrong with it: not `file not found` for a
    directory, nor Python's `[Errno 21] Is a directory: '...'`, nor a traceback."""
    module, argv, needles = wrong_path_case(case, tmp_path, tiny_model, pretrain_data)
    result = cli(module, *argv)
    line = expect_error(result, f"slm-{module.replace('_', '-')}", *needles)
    assert "[Errno" not in line, line


LONG_NAME_CASES = {  # command module -> its arguments, with {L} a path whose last part is over 255 bytes
    "score --model": ("score", ["--model", "{L}", "--input", "{text}", "--output", "{out}"]),
    "score --output": ("score", ["--model", "{model}", "--input", "{text}", "--output", "{L}"]),
    "train-bpe --text": ("train_bpe", ["--text", "{L}", "--vocab-size", "40", "--out", "{out}"]),
    "prepare-lm-text --books": ("prepare_lm_text", ["--books", "{L}", "--out", "{out}/t.txt"]),
    "init-slm --from": ("init_slm", ["--from", "{L}", "--out", "{out}"]),
    "rescore --dev": ("rescore", ["--dev", "{L}", "--dev-ref", "{ref}", "--lm", "{model}", "--out", "{out}"]),
    "rescore --out": ("rescore", ["--dev", "{tsv}", "--dev-ref", "{ref}", "--lm", "{model}", "--out", "{L}"]),
    "rescore --cache": ("rescore", ["--dev", "{tsv}", "--dev-ref", "{ref}", "--lm", "{model}", "--out", "{out}",
                                    "--cache", "{L}"]),
    "rescore-mt --dev": ("rescore_mt", ["--dev", "{L}", "--dev-ref", "{ref}", "--lm", "{model}", "--out", "{out}"]),
    "pretrain train --out": ("pretrain", ["train", "--kind", "slm", "--data", "{data}", "--out", "{L}",
                                          "--updates", "1"]),
    "model-card check": ("model_card", ["check", "{L}"]),
    "pairwise-preference --set": ("pairwise_preference", ["--set", "{L}", "--lm", "{model}", "--out", "{out}.md"]),
    "subset-nbest SRC": ("subset_nbest", ["--every", "2", "{L}", "{out}"]),
    "subset-nbest DST": ("subset_nbest", ["--every", "2", "{espnet_set}", "{L}"]),
    "am-scores --asr-config": ("am_scores", ["--asr-config", "{L}", "--asr-model", "{L}", "--wav-scp", "{L}", "{L}"]),
}


@pytest.mark.parametrize("case", LONG_NAME_CASES)
def test_a_name_over_255_bytes_is_one_line_not_a_traceback(tmp_path, tiny_model, pretrain_data, case, capsys):
    """The file system refuses a name over 255 bytes (ENAMETOOLONG) wherever the path is first touched, even by
    `Path.exists()`: each command says so in one line naming the file (in process, so an escaping OSError fails
    the test)."""
    import importlib

    module, template = LONG_NAME_CASES[case]
    tsv, ref = write_nbest(tmp_path / "nbest")
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    long = tmp_path / ("x" * 300)
    espnet_set = tmp_path / "espnet_set"
    for name, line in (("raw_hypotheses/1best_recog/text", "u1 AND GOD SAW\n"),
                       ("raw_hypotheses/1best_recog/score", "u1 -1.0\n"),
                       ("references/ref_wer.trn", "and god saw (spk-u1)\n")):
        (espnet_set / name).parent.mkdir(parents=True, exist_ok=True)
        (espnet_set / name).write_text(line)
    values = dict(L=long, text=text, out=tmp_path / "out", model=tiny_model, tsv=tsv, ref=ref, data=pretrain_data[0],
                  espnet_set=espnet_set)
    main = importlib.import_module(f"slm_lm.bin.{module}").main
    with pytest.raises(SystemExit) as stop:
        main([arg.format(**values) for arg in template])
    lines = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"slm-{module.replace('_', '-')}: error: {long}"), lines[0]
    assert "File name too long" in lines[0] and "[Errno" not in lines[0], lines[0]


def _file_size_limited(limit: int):
    """A preexec_fn: writes past `limit` bytes of any file fail with EFBIG (as on a full disk), not SIGXFSZ."""
    import resource
    import signal

    def limit_writes():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return limit_writes


def shown_lines(stderr: str) -> list:
    """The lines a terminal shows of `stderr`: a progress bar redraws (and erases) itself after a carriage
    return, so of each line only what follows its last one stays; blank lines are left out."""
    shown = [line.rsplit("\r", 1)[-1] for line in stderr.split("\n")]
    return [line for line in shown if line.strip()]


FULL_DISK_CASES = {  # command module -> arguments (OUT: where the outputs go), the file named, the reason
    "train-bpe": ("train_bpe", ["--text", "{text}", "--vocab-size", "40", "--out", "{out}/bpe"], "{out}/bpe",
                  "sentencepiece's model file came out unreadable (a full disk?)"),
    "prepare-lm-text": ("prepare_lm_text", ["--books", "{text}", "--normalized", "--out", "{out}/lm.txt"],
                        "{out}/lm.txt.parts/000000.txt", "File too large"),
    "pretrain encode": ("pretrain", ["encode", "--bpe-dir", "{data}", "--text", "{text}", "--out",
                                     "{out}/enc/train.ids.xz"], "{out}/enc/train.ids.xz", "File too large"),
    "pretrain train": ("pretrain", ["train", "--kind", "slm", "--data", "{data}", "--updates", "2", *PRETRAIN_TINY,
                                    "--out", "{out}/run"], "{out}/run/checkpoint.pt", "File too large"),
    "score": ("score", ["--model", "{model}", "--input", "{text}", "--output", "{out}/sub/scores.tsv"],
              "{out}/sub/scores.tsv", "File too large"),
}


@pytest.mark.parametrize("case", FULL_DISK_CASES)
def test_a_write_refused_for_room_is_one_line_and_leaves_nothing(tmp_path, tiny_model, pretrain_data, case):
    """Under a 1,000-byte file-size limit (RLIMIT_FSIZE: writes fail as on a full disk, with EFBIG), each
    command says which file it could not write, in one line with exit 2, and leaves nothing where its outputs
    would have gone: no half-written file, no corpus without its record, no directory it created."""
    import random

    module, template, named, reason = FULL_DISK_CASES[case]
    words, draw = TEXT.split(), random.Random(0)
    text = tmp_path / "text.txt"  # ~6 kB that compress to more than 1,000 bytes
    text.write_text("".join(" ".join(draw.choices(words, k=8)) + "\n" for _ in range(150)))
    out = tmp_path / "out"
    out.mkdir()
    values = dict(text=text, out=out, data=pretrain_data[0], model=tiny_model)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run([sys.executable, "-m", f"slm_lm.bin.{module}", *[a.format(**values) for a in template]],
                            capture_output=True, env=env, timeout=600, preexec_fn=_file_size_limited(1000))
    result.stderr = result.stderr.decode()  # as bytes: text mode would turn the bars' carriage returns into lines
    errors = shown_lines(result.stderr)  # the bar of the work done before the write is erased
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(errors) == 1 and errors[0].endswith(reason), repr(result.stderr[-3000:])
    assert errors[0].startswith(f"slm-{module.replace('_', '-')}: error: {named.format(**values)}"), errors[0]
    assert list(out.iterdir()) == [], sorted(out.rglob("*"))


@pytest.mark.parametrize("read_only", [True, False])
def test_an_output_that_cannot_be_written_says_whether_the_file_system_is_read_only(tmp_path, monkeypatch,
                                                                                      read_only):
    """Root ignores permission bits, so the refusal is staged: `os.access` says no, and statvfs says whether the
    file system is mounted read-only (found by hand on a read-only tmpfs: it was "permission denied")."""
    from slm_lm.common import outputs

    from types import SimpleNamespace

    statvfs = os.statvfs

    def flags(path):
        return SimpleNamespace(f_flag=statvfs(path).f_flag | (os.ST_RDONLY if read_only else 0))

    monkeypatch.setattr(outputs.os, "access", lambda path, mode: False)
    monkeypatch.setattr(outputs.os, "statvfs", flags)
    reason = "a read-only file system" if read_only else "permission denied"
    for check in (lambda: outputs.check_output_file("--out", tmp_path / "x.tsv"),
                  lambda: outputs.check_output_dir("--out", tmp_path / "d", (), (), "slm-test")):
        with pytest.raises(slm_lm.common.errors.InputError, match=f"cannot write in {tmp_path} \\({reason}\\)"):
            check()


MID_WORK_CASES = {  # command module -> arguments that fail once its progress bar is showing, the error's start
    "rescore": ("rescore", ["--dev", "{tsv}", "--dev-ref", "{ref}", "--lm", "{model}", "--no-normalize",
                            "--out", "{out}/r"], "set dev, utterance u2, rank 2"),
    "pretrain encode": ("pretrain", ["encode", "--bpe-dir", "{data}", "--text", "{gap}", "--out", "{out}/t.ids.xz"],
                        "{gap}:4: empty line"),
    "prepare-lm-text": ("prepare_lm_text", ["--books", "{text}", "{latin1}", "--normalized", "--out", "{out}/lm.txt"],
                        "{latin1}:2: not UTF-8 text"),
    "espnet_lm.data": ("slm_lm.espnet_lm.data", ["{gap}", "{out}/dump", "--bpemodel", "{data}/bpe.model"],
                       "{gap}:4: empty line"),
}


@pytest.mark.parametrize("case", MID_WORK_CASES)
def test_a_failure_while_a_progress_bar_shows_leaves_only_the_error_line(tmp_path, tiny_model, pretrain_data, case):
    """A command that fails in the middle of its work erases its progress bar before its error: a terminal shows
    one line (the bar was left above it, or drawn again after it, which made two)."""
    module, template, start = MID_WORK_CASES[case]
    tsv, ref = write_nbest(tmp_path / "nbest")
    tsv.write_text(tsv.read_text().replace("WITHOUT FORM\n", "WITHOUT \u03a9\n"))
    (tmp_path / "gap.txt").write_text(TEXT + "\n" + TEXT)
    (tmp_path / "text.txt").write_text(TEXT)
    (tmp_path / "latin1.txt").write_bytes(b"AND GOD SAW\nCAF\xc9\n")
    out = tmp_path / "out"
    out.mkdir()
    values = dict(tsv=tsv, ref=ref, model=tiny_model, data=pretrain_data[0], out=out, gap=tmp_path / "gap.txt",
                  text=tmp_path / "text.txt", latin1=tmp_path / "latin1.txt")
    result = run(sys.executable, "-m", module if "." in module else f"slm_lm.bin.{module}",
                 *[arg.format(**values) for arg in template], text=False)
    stderr = result.stderr.decode()
    assert result.returncode == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert "%|" in stderr or "sent [" in stderr or "lines [" in stderr, stderr  # a bar showed
    lines = shown_lines(stderr)
    command = "slm_lm.espnet_lm.data" if "." in module else f"slm-{module.replace('_', '-')}"
    assert len(lines) == 1 and lines[0].startswith(f"{command}: error: {start.format(**values)}"), repr(stderr[-3000:])


@pytest.mark.parametrize("case", ["missing", "long name", "directory", "yaml"])
def test_slm_lm_train_refuses_a_bad_config_in_one_line_before_importing_espnet(tmp_path, case):
    """`--config` is checked before ESPnet is imported: its import printed nltk's eight `[nltk_data]` download
    errors (no network), and its parser the command line and, for a missing file, its usage lines."""
    pytest.importorskip("espnet2")
    (tmp_path / "bad.yaml").write_text("lm: slm\nlm_conf: [1, 2\n")
    config, needle = {"missing": (tmp_path / "none.yaml", "cannot read the ESPnet config: No such file"),
                      "long name": (tmp_path / ("x" * 300), "File name too long"),
                      "directory": (tmp_path, "is a directory, not a file"),
                      "yaml": (tmp_path / "bad.yaml", "bad.yaml:3: expected ',' or ']'")}[case]
    result = cli("lm_train", "--config", config)
    expect_error(result, "slm-lm-train", needle)
    assert result.stdout == "", result.stdout  # ESPnet's import printed a line on stdout too


def test_asr_inference_prints_no_warning_of_espnets_import_before_its_error(tmp_path):
    """ESPnet's import printed torch's FutureWarnings about espnet2's own `torch.cuda.amp.autocast` decorators
    (two warnings of two lines each) before slm_lm.bin.asr_inference's error line."""
    pytest.importorskip("espnet2")
    result = run(sys.executable, "-m", "slm_lm.bin.asr_inference", "--lm_train_config", tmp_path / "none.yaml",
                 "--lm_file", tmp_path / "m.pth", "--asr_train_config", tmp_path / "a.yaml",
                 "--asr_model_file", tmp_path / "a.pth", "--output_dir", tmp_path / "out",
                 "--data_path_and_name_and_type", f"{tmp_path / 'wav.scp'},speech,sound")
    expect_error(result, "slm_lm.bin.asr_inference", f"{tmp_path / 'none.yaml'}: cannot read the ESPnet config")


def test_espnet_tools_print_no_nltk_download_errors(tmp_path):
    """slm_lm.bin.lm_calc_perplexity imports ESPnet before it checks its --train_config: nltk's download
    messages (g2p_en's, at import, with no network) came before the error line."""
    pytest.importorskip("espnet2")
    result = run(sys.executable, "-m", "slm_lm.bin.lm_calc_perplexity", "--train_config", tmp_path / "none.yaml",
                 "--model_file", tmp_path / "m.pth", "--data_path_and_name_and_type", f"{tmp_path / 'text'},text,text",
                 "--output_dir", tmp_path / "ppl")
    expect_error(result, "slm_lm.bin.lm_calc_perplexity", f"{tmp_path / 'none.yaml'}: cannot read the ESPnet config")


# Fourth round: the newest commands (data, AM scores, MT, zero-shot, the GPU script) keep the same promises

GPU_SESSION = ROOT / "local" / "gpu" / "gpu_session.py"


def lm_mirror(tmp_path, md5=True):
    """A mirror holding librispeech_lm/librispeech-lm-norm.txt.gz (and its md5sum.txt); its bytes."""
    import gzip
    import hashlib

    src = tmp_path / "mirror" / "librispeech_lm"
    src.mkdir(parents=True)
    corpus = gzip.compress(b"".join(b"SENTENCE NUMBER %d\n" % i for i in range(2000)))
    (src / "librispeech-lm-norm.txt.gz").write_bytes(corpus)
    if md5:
        (src / "md5sum.txt").write_text(f"{hashlib.md5(corpus).hexdigest()}  librispeech-lm-norm.txt.gz\n")
    return corpus


def data_get(tmp_path, *names):
    return cli("data", "get", *(names or ["librispeech-lm"]), "--dir", tmp_path / "d", "--mirror", tmp_path / "mirror",
               "--no-progress")


# 1. A user's file is never moved, renamed or replaced

def test_slm_data_refuses_a_users_copy_of_the_lm_corpus_and_leaves_it_where_it_is(tmp_path):
    """The user's own copy, whose MD5 differs from the list, was renamed to `.gz.bad`."""
    lm_mirror(tmp_path)
    mine = tmp_path / "d" / "librispeech_lm" / "librispeech-lm-norm.txt.gz"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"my own corpus")
    before = snapshot(tmp_path / "d")
    expect_error(data_get(tmp_path), "slm-data", f"{mine}: is there and its MD5", "it is not replaced: move it away")
    assert snapshot(tmp_path / "d") == before


def test_download_librispeech_refuses_a_users_archive_and_leaves_it_where_it_is(tmp_path):
    """The recipe's download stage (the same checksum code): an archive of the user's in archives/."""
    import hashlib

    mirror = tmp_path / "mirror" / "12"
    mirror.mkdir(parents=True)
    (mirror / "dev-clean.tar.gz").write_bytes(b"the mirror's archive")
    (mirror / "md5sum.txt").write_text(f"{hashlib.md5(b'the mirror archive').hexdigest()}  dev-clean.tar.gz\n")
    mine = tmp_path / "d" / "archives" / "dev-clean.tar.gz"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"my own archive")
    before = snapshot(tmp_path / "d")
    result = run(sys.executable, RECIPE_LOCAL / "download_librispeech.py", "--dir", tmp_path / "d", "--mirror",
                 tmp_path / "mirror", "--parts", "dev-clean", cwd=RECIPE_LOCAL, text=False)
    assert result.returncode == 2 and b"Traceback" not in result.stderr, result.stderr
    last = result.stderr.decode().split("\r")[-1].strip()  # after the MD5's progress bar, erased
    assert last.startswith(f"download_librispeech.py: error: {mine}: is there and its MD5") and "not replaced" in last
    assert snapshot(tmp_path / "d") == before


# 2. Silently wrong results

@pytest.mark.parametrize("md5", [False, True])
def test_slm_data_never_keeps_a_garbled_part_file(tmp_path, md5):
    """A `.part` of garbage: without md5sum.txt (size checked only) it was resumed and the corrupt corpus
    stored, exit 0; with one, the whole download was refused. Now a `.part` is resumed only when an MD5 checks
    the result, and a resumed one that is wrong is fetched again from the start."""
    corpus = lm_mirror(tmp_path, md5=md5)
    dest = tmp_path / "d" / "librispeech_lm" / "librispeech-lm-norm.txt.gz"
    dest.parent.mkdir(parents=True)
    (dest.parent / (dest.name + ".part")).write_bytes(b"\0garbage" * 100)
    result = data_get(tmp_path)
    assert result.returncode == 0, result.stderr
    assert dest.read_bytes() == corpus
    assert sorted(p.name for p in dest.parent.iterdir()) == [dest.name]


def test_slm_data_deletes_only_its_own_download_when_its_md5_is_wrong(tmp_path):
    lm_mirror(tmp_path)
    (tmp_path / "mirror" / "librispeech_lm" / "md5sum.txt").write_text(f"{'0' * 32}  librispeech-lm-norm.txt.gz\n")
    expect_error(data_get(tmp_path), "slm-data", "librispeech-lm-norm.txt.gz: downloaded, MD5",
                 "differs from 00000000000000000000000000000000")
    assert sorted(p.name for p in (tmp_path / "d" / "librispeech_lm").iterdir()) == []


def nbest_set(root, texts=("A B", "C D", "E F")):
    """An N-best set in slm-data's layout: 2 ranks of 3 utterances, references."""
    for k in (1, 2):
        d = root / "raw_hypotheses" / f"{k}best_recog"
        d.mkdir(parents=True)
        (d / "text").write_text("".join(f"u{i} {t}\n" for i, t in enumerate(texts)))
        (d / "score").write_text("".join(f"u{i} -{k}.0\n" for i in range(len(texts))))
    (root / "references").mkdir()
    (root / "references" / "ref_wer.trn").write_text("".join(f"{t}\t(s-u{i})\n" for i, t in enumerate(texts)))
    return root


@pytest.mark.parametrize("case", ["blank_hypothesis", "blank_score", "bad_trn_line"])
def test_subset_nbest_refuses_a_set_it_would_cut_silently(tmp_path, case):
    """A blank line in place of a hypothesis (or of its score), or a reference line that is not a trn line:
    the subset was written without that hypothesis (reference), exit 0."""
    src = nbest_set(tmp_path / "src")
    path = src / ("references/ref_wer.trn" if case == "bad_trn_line" else
                  f"raw_hypotheses/2best_recog/{'text' if case == 'blank_hypothesis' else 'score'}")
    lines = path.read_text().splitlines()
    lines[1] = "C D without an id" if case == "bad_trn_line" else ""
    path.write_text("\n".join(lines) + "\n")
    before = snapshot(tmp_path)
    result = cli("subset_nbest", src, tmp_path / "dst", "--every", "1")
    line = expect_error(result, "slm-subset-nbest", str(src))
    assert (f"{path}:2" in line) if case == "bad_trn_line" else "has no line in" in line, line
    assert snapshot(tmp_path) == before and not (tmp_path / "dst").exists()


@pytest.mark.parametrize("argv,needle", [
    (["prepare", "--travel-mib", "nan"], "argument --travel-mib: nan: must be a finite number"),
    (["prepare", "--spare-mib", "-1"], "argument --spare-mib: -1: must be 0 or more"),
    (["run", "--batch-tokens", "-5"], "argument --batch-tokens: -5: must be 1 or more"),
    (["run", "--minutes", "nan"], "argument --minutes: nan: must be a finite number"),
    (["run", "--train-minutes", "0"], "argument --train-minutes: 0: must be more than 0"),
    (["run", "--warmup", "2"], "argument --warmup: 2: must be 0 or more and at most 1"),
    (["run", "--part-mib", "100"], "argument --part-mib: 100: must be more than 0 and at most 16"),
    (["score-snapshots", "--max-tokens", "0"], "argument --max-tokens: 0: must be 1 or more"),
])
def test_gpu_session_refuses_an_option_it_cannot_use(tmp_path, argv, needle):
    """`--travel-mib nan` copied the whole corpus, `--batch-tokens -5` was accepted, `--minutes nan` exited 1
    with nothing on stderr: a GPU window lost to a bad option."""
    required = {"prepare": ["--corpus", tmp_path / "c", "--data", tmp_path / "d"],
                "run": ["--data", tmp_path / "d", "--out", tmp_path / "o", "--dry-run"],
                "score-snapshots": ["--data", tmp_path / "d", "--run-dir", tmp_path / "r"]}[argv[0]]
    expect_error(run(sys.executable, GPU_SESSION, argv[0], *required, *argv[1:]), "gpu_session", needle)
    assert sorted(tmp_path.iterdir()) == []


# 3. FIFOs and devices: refused at once (they blocked, or were read until memory ran out)

def fifo(path):
    os.mkfifo(path)
    return path


def test_slm_data_refuses_a_fifo_as_the_mirrors_md5sum(tmp_path):
    lm_mirror(tmp_path, md5=False)
    md5sum = fifo(tmp_path / "mirror" / "librispeech_lm" / "md5sum.txt")
    expect_error(data_get(tmp_path), "slm-data", f"{md5sum}: not a regular file (a FIFO, device or socket)")


def test_slm_data_refuses_a_fifo_in_the_data_directory(tmp_path):
    (tmp_path / "mirror" / "blimp").mkdir(parents=True)
    dest = tmp_path / "d" / "blimp" / "adjunct_island.jsonl"
    dest.parent.mkdir(parents=True)
    fifo(dest)
    expect_error(data_get(tmp_path, "blimp"), "slm-data", f"{dest}: not a regular file nor a directory (a FIFO",
                 "not replaced")


@pytest.mark.parametrize("what", ["fifo", "dev_zero"])
def test_a_fifo_or_device_as_a_text_input_is_refused_at_once(tmp_path, what):
    """Every reader of text (`slm_lm.common.fileio.read_text_lines`, the Kaldi tables, N-best and BLiMP files)."""
    bad = fifo(tmp_path / "fifo") if what == "fifo" else Path("/dev/zero")
    (tmp_path / "ref").write_text("u1 A B\n")
    (tmp_path / "blimp").mkdir()
    (tmp_path / "blimp" / "x.jsonl").symlink_to(bad)
    cases = [
        (cli("score", "--model", SLM_BOOKS, "--input", bad, "--output", tmp_path / "o.tsv"), "slm-score", bad),
        (cli("compare_wer", "--ref", tmp_path / "ref", "--hyp", f"a={bad}", "--hyp", f"b={bad}"), "slm-compare-wer",
         bad),
        (cli("compare_wer", "--ref", bad, "--hyp", f"a={tmp_path / 'ref'}", "--hyp", f"b={tmp_path / 'ref'}"),
         "slm-compare-wer", bad),
        (cli("blimp", "--model", SLM_BOOKS, "--data", tmp_path / "blimp", "--out", tmp_path / "o", "--no-progress"),
         "slm-blimp", tmp_path / "blimp" / "x.jsonl"),
        (cli("pretrain", "encode", "--text", bad, "--bpe-dir", SLM_BOOKS, "--out", tmp_path / "c.ids.xz"),
         "slm-pretrain", bad),
    ]
    for result, command, path in cases:
        expect_error(result, command, f"{path}: ", "not a regular file")


def test_an_earlier_runs_record_that_is_a_fifo_is_not_read(tmp_path):
    """slm-subset-nbest read DST/subset.json (slm-rescore OUT/tuning.json, slm-lm-combination OUT/combination.md)
    to tell an earlier run's: a FIFO there blocked it; now it is not the command's, and refused."""
    src = nbest_set(tmp_path / "src")
    (tmp_path / "dst").mkdir()
    fifo(tmp_path / "dst" / "subset.json")
    expect_error(cli("subset_nbest", src, tmp_path / "dst", "--every", "1"), "slm-subset-nbest",
                 f"{tmp_path / 'dst' / 'subset.json'}: not written by slm-subset-nbest")
    (tmp_path / "out").mkdir()
    fifo(tmp_path / "out" / "tuning.json")  # slm-rescore's record of an earlier run
    tsv, ref = nbest_tsv(tmp_path / "in")
    expect_error(cli("rescore", *rescore_argv(tsv, ref, tmp_path / "out")), "slm-rescore",
                 f"{tmp_path / 'out' / 'tuning.json'}: not a tuning.json of slm-rescore")


# 4. slm-am-scores around ESPnet and soundfile: one line, before the model runs where it can be

@pytest.fixture(scope="module")
def asr_experiment(tmp_path_factory):
    """A tiny random ESPnet ASR model (characters A-Z), two utterances of noise, and an N-best set of them."""
    import numpy as np
    import soundfile
    import yaml
    from espnet2.tasks.asr import ASRTask
    from espnet2.utils.yaml_no_alias_safe_dump import yaml_no_alias_safe_dump

    root = tmp_path_factory.mktemp("asr_experiment")
    tokens = ["<blank>", "<unk>", "<space>", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ", "<sos/eos>"]
    (root / "tokens.txt").write_text("\n".join(tokens) + "\n")
    (root / "asr.yaml").write_text(yaml.safe_dump({
        "frontend": "default", "frontend_conf": {"n_fft": 256, "hop_length": 160, "n_mels": 20},
        "encoder": "transformer", "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 32,
                                                   "num_blocks": 1},
        "decoder": "transformer", "decoder_conf": {"attention_heads": 2, "linear_units": 32, "num_blocks": 1},
        "model_conf": {"ctc_weight": 0.3}}))
    args = ASRTask.get_parser().parse_args(["--config", str(root / "asr.yaml"), "--token_list",
                                            str(root / "tokens.txt"), "--token_type", "char", "--output_dir",
                                            str(root / "asr")])
    torch.manual_seed(0)
    model = ASRTask.build_model(args)
    (root / "asr").mkdir()
    with open(root / "asr" / "config.yaml", "w") as f:
        yaml_no_alias_safe_dump(vars(args), f)
    torch.save(model.state_dict(), root / "asr" / "model.pth")
    rng = np.random.default_rng(0)
    for uttid in ("u1", "u2"):
        soundfile.write(root / f"{uttid}.wav", rng.normal(0, 0.1, 8000).astype(np.float32), 16000)
    (root / "wav.scp").write_text(f"u1 {root / 'u1.wav'}\nu2 {root / 'u2.wav'}\n")
    rank = root / "decode" / "1best_recog"
    rank.mkdir(parents=True)
    (rank / "token_int").write_text("u1 3 4 5\nu2 6 7\n")
    (rank / "score").write_text("u1 -1.0\nu2 -2.0\n")
    (rank / "text").write_text("u1 ABC\nu2 DE\n")
    return root


def am_scores(exp, tmp_path, case):
    """The argv of one bad-input case of slm-am-scores, and what its error line names."""
    decode = tmp_path / "decode"
    shutil.copytree(exp / "decode", decode)
    config, model, wav_scp = exp / "asr" / "config.yaml", exp / "asr" / "model.pth", tmp_path / "wav.scp"
    wav_scp.write_text((exp / "wav.scp").read_text())
    device, needles = "cpu", []
    if case == "no_path":
        wav_scp.write_text(f"u1 {exp / 'u1.wav'}\nu2\n")
        needles = [f"{wav_scp}:2: utterance 'u2' has no audio file"]
    elif case == "missing_audio":
        wav_scp.write_text(f"u1 {exp / 'u1.wav'}\nu2 {tmp_path / 'gone.wav'}\n")
        needles = [f"{wav_scp}:2: {tmp_path / 'gone.wav'}: audio file not found"]
    elif case == "not_audio":
        (tmp_path / "text.wav").write_text("not audio at all\n")
        wav_scp.write_text(f"u1 {tmp_path / 'text.wav'}\nu2 {exp / 'u2.wav'}\n")
        needles = [f"{wav_scp}:1: {tmp_path / 'text.wav'}: not an audio file soundfile can read"]
    elif case == "config_not_yaml":
        config = tmp_path / "config.yaml"
        config.write_text("encoder: [transformer\n")
        needles = [f"{config}:2: expected ',' or ']', but got '<stream end>' (cannot read the ESPnet config)"]
    elif case == "config_of_another_model":
        import yaml

        edited = yaml.safe_load((exp / "asr" / "config.yaml").read_text())
        edited["encoder_conf"]["output_size"] = 24
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump(edited))
        needles = [f"{model}: weights do not match the model of --asr-config {config}", "size mismatch"]
    elif case == "token_beyond_vocabulary":
        (decode / "1best_recog" / "token_int").write_text("u1 3 4 5\nu2 6 700\n")
        needles = [f"{decode / '1best_recog' / 'token_int'}:2: token id 700 is not in the vocabulary of 30 tokens"]
    elif case == "no_gpu":
        device = "cuda"
        needles = ["--device cuda: CUDA is not available"]
    elif case == "truncated_model":
        model = tmp_path / "model.pth"
        model.write_bytes((exp / "asr" / "model.pth").read_bytes()[:5000])
        needles = [f"{model}: not a readable torch weights file, truncated or garbled"]
    argv = ["--asr-config", config, "--asr-model", model, "--wav-scp", wav_scp, "--device", device, decode]
    return argv, needles


@pytest.mark.parametrize("case", ["no_path", "missing_audio", "not_audio", "config_not_yaml",
                                  "config_of_another_model", "token_beyond_vocabulary", "no_gpu", "truncated_model"])
def test_am_scores_bad_input_is_one_line(asr_experiment, tmp_path, case):
    """8 of slm-am-scores' cases ended in a traceback of ESPnet, soundfile or torch (a truncated model said
    `Invalid argument` without the file); the model of another config was loaded in part (strict=False)."""
    if case == "no_gpu" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    argv, needles = am_scores(asr_experiment, tmp_path, case)
    before = snapshot(tmp_path)
    expect_error(cli("am_scores", *argv), "slm-am-scores", *needles)
    assert snapshot(tmp_path) == before


def test_am_scores_of_a_good_experiment_are_written(asr_experiment, tmp_path):
    argv, _ = am_scores(asr_experiment, tmp_path, "none")
    result = run(sys.executable, "-m", "slm_lm.bin.am_scores", *argv)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr
    assert all(line.startswith("slm-am-scores ") for line in result.stderr.replace("\r", "\n").split("\n")
               if line.strip()), result.stderr  # its progress bar only (no FutureWarning of ESPnet's code)
    scores = (tmp_path / "decode" / "1best_recog" / "scores").read_text().splitlines()
    rows = [json.loads(line.split(" ", 1)[1]) for line in scores]
    assert [sorted(r) for r in rows] == [["ctc", "decoder", "length_bonus"]] * 2 and rows[0]["length_bonus"] == 4


# 5. Tracebacks left elsewhere

@pytest.mark.parametrize("card,needle", [
    ({}, "not a slm-model-card make output: KeyError 'check'"),
    ({"check": {"lambda": "x"}}, "not a slm-model-card make output: ArgumentTypeError x: not a number"),
    ({"check": []}, "not a slm-model-card make output: TypeError"),
])
def test_model_card_check_of_a_card_of_another_shape_is_one_line(tmp_path, card, needle):
    model = shutil.copytree(SLM_BOOKS, tmp_path / "model")
    (model / "card.json").write_text(json.dumps(card))
    expect_error(cli("model_card", "check", model), "slm-model-card", f"{model / 'card.json'}: {needle}")


def test_score_nbest_lm_key_file_that_is_not_utf8_is_one_line(tmp_path):
    keys = tmp_path / "keys.1"
    keys.write_bytes(b"u1\nu\xe92\n")
    nbest = nbest_set(tmp_path / "dev")
    result = run(sys.executable, RECIPE_LOCAL / "score_nbest_lm.py", "--lm", SLM_BOOKS, "--keys", keys, "--cache",
                 tmp_path / "cache", nbest, cwd=RECIPE_LOCAL)
    expect_error(result, "score_nbest_lm.py", f"{keys}:2: not UTF-8 text")


@pytest.fixture(scope="module")
def hook_pth_line(tmp_path_factory) -> str:
    """The line of slm_lm_espnet_hook.pth as an install of this checkout ships it."""
    import zipfile

    out = tmp_path_factory.mktemp("wheel")
    code = "import sys; from setuptools import build_meta; print(build_meta.build_editable(sys.argv[1]))"
    built = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    return zipfile.ZipFile(out / built.stdout.split()[-1]).read("slm_lm_espnet_hook.pth").decode()


@pytest.mark.parametrize("broken", ["def install(:\n", "raise ImportError('half-copied')\n", "x = 1\n"])
def test_a_broken_hook_module_earlier_on_the_path_is_one_warning_line(tmp_path, hook_pth_line, broken):
    """A broken slm_lm_espnet_hook.py earlier on PYTHONPATH made every Python start print site's traceback
    (a SyntaxError); now one warning line, as a failed registration gives, and the program runs."""
    site_dir, shadow = tmp_path / "site", tmp_path / "shadow"
    site_dir.mkdir()
    shadow.mkdir()
    (site_dir / "slm_lm_espnet_hook.pth").write_text(hook_pth_line)
    (tmp_path / "lib64").symlink_to(site_dir)  # a venv's lib64 -> lib: site reads the .pth files twice
    (shadow / "slm_lm_espnet_hook.py").write_text(broken)
    code = (f"import site; site.addsitedir({str(site_dir)!r}); site.addsitedir({str(tmp_path / 'lib64')!r}); "
            "print('ran')")
    env = dict(os.environ, PYTHONPATH=str(shadow))
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "ran\n", result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("slm_lm: warning: ESPnet runs without the slm_lm LM kinds ("), lines
    assert "SLM_LM_NO_ESPNET_HOOK=1" in lines[0]
    quiet = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                           env=dict(env, SLM_LM_NO_ESPNET_HOOK="1"), cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


@pytest.mark.parametrize("case", ["data_is_a_file", "out_is_a_file", "run_dir_is_a_file", "run_dir_missing"])
def test_gpu_session_folders_of_the_wrong_kind_are_one_line(tmp_path, case):
    (tmp_path / "file").write_text("mine")
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.ids.xz", "valid.ids.xz", "bpe.model", "tokens.txt", "nbest_texts.txt.xz", "dev_texts.txt.xz"):
        (data / name).write_bytes(b"")
    if case == "run_dir_missing":
        argv, needle = ["score-snapshots", "--data", data, "--run-dir", tmp_path / "none"], \
            f"--run-dir {tmp_path / 'none'}: folder not found"
    else:
        option = {"data_is_a_file": "--data", "out_is_a_file": "--out", "run_dir_is_a_file": "--run-dir"}[case]
        folders = {"--data": data, "--out": tmp_path / "out", "--run-dir": tmp_path / "run", option: tmp_path / "file"}
        argv = ["run", "--dry-run", *(x for k, v in folders.items() for x in (k, v))]
        needle = f"{option} {tmp_path / 'file'}: is a file, not a"
    before = snapshot(tmp_path)
    expect_error(run(sys.executable, GPU_SESSION, *argv), "gpu_session", needle)
    assert snapshot(tmp_path) == before


# 6. Messages in the one-line format

def test_a_closed_standard_output_ends_slm_score_quietly_as_cat(tmp_path):
    """`slm-score ... | head -1` ended with `slm-score: error: Broken pipe`, exit 2."""
    (tmp_path / "in.txt").write_text("AND GOD SAW THE LIGHT\n" * 3000)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "slm_lm.bin.score", "--model", "slm-books", "--input",
                             tmp_path / "in.txt", "--tokens"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    first = proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=600) == 141 and first.startswith(b"1\t"), (proc.returncode, stderr)
    assert "error" not in stderr and "Traceback" not in stderr and "Exception" not in stderr, stderr


def test_a_broken_pipe_that_is_not_standard_output_is_still_an_error(capsys):
    from slm_lm.common.errors import fail

    with pytest.raises(SystemExit) as info:
        fail("slm-score", BrokenPipeError(32, "Broken pipe", "/x/fifo"))
    assert info.value.code == 2 and capsys.readouterr().err == "slm-score: error: /x/fifo: Broken pipe\n"


def test_temporary_files_of_a_killed_writer_are_removed_by_the_next_one(tmp_path):
    """A killed `slm-data get` (or `slm-am-scores`, or any writer through slm_lm.common.fileio) left `.NAME.XXXX.tmp`
    files that later runs never removed: the next writer of NAME removes those no live writer holds."""
    from slm_lm.common.fileio import atomic_open, write_atomic

    target = tmp_path / "scores"
    killed = run(sys.executable, "-c", "import os, signal\nfrom slm_lm.common.fileio import atomic_open\n"
                 f"with atomic_open({str(target)!r}) as f:\n    f.write('half')\n    f.flush()\n"
                 "    os.kill(os.getpid(), signal.SIGKILL)\n")
    assert killed.returncode == -9
    (tmp_path / ".scores.notours.tmp").write_text("a name mkstemp does not make: not ours")
    (tmp_path / ".other.abcd1234.tmp").write_text("another file's")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(left) == 3 and any(n.startswith(".scores.") and n != ".scores.notours.tmp" for n in left), left
    with atomic_open(target) as handle:  # a live writer's temporary file is kept
        write_atomic(target, "other")
        handle.write("mine")
    assert target.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.abcd1234.tmp", ".scores.notours.tmp", "scores"]


def test_slm_data_removes_what_a_killed_run_left(tmp_path):
    """`slm-data get blimp` killed while it wrote a paradigm: its temporary file goes with the next run."""
    from conftest import MIRROR

    dest = tmp_path / "d" / "blimp"
    dest.mkdir(parents=True)
    killed = run(sys.executable, "-c", "import os, signal\nfrom slm_lm.common.fileio import atomic_open\n"
                 f"with atomic_open({str(dest / 'adjunct_island.jsonl')!r}) as f:\n    f.write('{{half')\n"
                 "    f.flush()\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    assert killed.returncode == -9 and len(list(dest.glob(".adjunct_island.jsonl.*.tmp"))) == 1
    result = cli("data", "get", "blimp", "--dir", tmp_path / "d", "--mirror", MIRROR, "--no-progress")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in dest.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("case", ["md5sum", "trans_txt"])
def test_a_file_and_line_are_written_file_colon_line(tmp_path, case):
    if case == "md5sum":
        lm_mirror(tmp_path, md5=False)
        md5sum = tmp_path / "mirror" / "librispeech_lm" / "md5sum.txt"
        md5sum.write_text(f"{'0' * 32}  a.gz\nnot a checksum line\n")
        expect_error(data_get(tmp_path), "slm-data", f"{md5sum}:2: expected 'MD5 FILE'")
    else:
        chapter = tmp_path / "dev-clean" / "19" / "198"
        chapter.mkdir(parents=True)
        (chapter / "19-198.trans.txt").write_text("19-198-0000 HELLO\n19-198-0001\n")
        (chapter / "19-198-0000.flac").write_bytes(b"")
        result = run(sys.executable, RECIPE_LOCAL / "data_prep.py", "--out", tmp_path / "data", tmp_path / "dev-clean",
                     cwd=RECIPE_LOCAL)
        expect_error(result, "data_prep.py", f"{chapter / '19-198.trans.txt'}:2: expected 'UTTID TEXT'")


def test_pretrain_names_the_file_and_the_reason_of_an_empty_checkpoint_or_odd_ids(tmp_path):
    import lzma

    from slm_lm.model.tokenizer import Tokenizer

    data = tmp_path / "data"
    data.mkdir()
    tokenizer = Tokenizer.from_dir(SLM_BOOKS)
    tokenizer.save(data)
    for name in ("train", "valid"):
        (data / f"{name}.ids.xz").write_bytes(lzma.compress(bytes([5, 0, 6, 0, 0, 0]) * 50))
    out = tmp_path / "out"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"")
    argv = ["train", "--kind", "slm", "--size", "tiny", "--data", data, "--out", out, "--updates", "1"]
    expect_error(cli("pretrain", *argv), "slm-pretrain", f"{out / 'checkpoint.pt'}: empty file")
    (out / "checkpoint.pt").unlink()
    (data / "train.ids.xz").write_bytes(lzma.compress(bytes([5, 0, 0])))
    expect_error(cli("pretrain", *argv), "slm-pretrain", f"{data / 'train.ids.xz'}: 3 bytes once decompressed, an odd")


def test_train_bpe_vocabulary_too_large_is_one_line(tmp_path):
    (tmp_path / "text.txt").write_text(TEXT * 30)
    expect_error(cli("train_bpe", "--text", tmp_path / "text.txt", "--vocab-size", "100000", "--out", tmp_path / "b"),
                 "slm-train-bpe", f"{tmp_path / 'text.txt'}: sentencepiece training failed", "Vocabulary size")


def test_train_bpe_removes_what_a_killed_run_left_and_not_a_live_runs(tmp_path):
    import fcntl

    (tmp_path / "text.txt").write_text(TEXT * 30)
    out = tmp_path / "b"
    killed, live, theirs = out / ".bpe.k1ll3d_0", out / ".bpe.l1ve_run", out / ".bpe.mine"
    for folder in (killed, live, theirs):
        folder.mkdir(parents=True)
        (folder / "bpe.model").write_bytes(b"half written")
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # as a run still training holds its own
    try:
        result = cli("train_bpe", "--text", tmp_path / "text.txt", "--vocab-size", "30", "--out", out)
    finally:
        os.close(held)
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(out)) == [".bpe.l1ve_run", ".bpe.mine", "bpe.model", "tokens.txt"]


def test_score_wer_names_the_reference_line_of_an_empty_reference(tmp_path):
    data, decode = tmp_path / "data", tmp_path / "decode"
    (decode / "1best_recog").mkdir(parents=True)
    data.mkdir()
    (data / "text").write_text("u1 A B\nu2\n")
    (decode / "1best_recog" / "text").write_text("u1 A B\nu2 C\n")
    result = run(sys.executable, RECIPE_LOCAL / "score_wer.py", "--data", data, decode, cwd=RECIPE_LOCAL)
    expect_error(result, "score_wer.py", f"{data / 'text'}:2: empty reference for u2")


@pytest.mark.parametrize("value", ["0", "-2"])
def test_decode_nbest_merge_of_no_shards_blames_the_option(tmp_path, value):
    """`--merge 0` decoded instead, and blamed `--asr-config None`."""
    data, out = decoded_shards(tmp_path)
    result = run(sys.executable, DECODE_NBEST, "--merge", value, "--data", data, "--out", out)
    expect_error(result, "decode_nbest.py", f"argument --merge: {value}: must be 1 or more")
