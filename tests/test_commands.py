"""Every command keeps the same promises: it never replaces an input or a file it did not create (one set of
output rules, slm_lm.common.outputs), exits 0 after a good run with nothing on stderr but progress, checks every
numeric option, and names the line of a bad one in its input."""
import configparser
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from conftest import MIRROR
from test_bad_input import (ROOT, TEXT, blimp_record, cli, expect_error, fork_server, nbest_tsv, run,  # noqa: F401
                            snapshot, tiny_model)

REFS = {"u1": "AND GOD SAW THE LIGHT", "u2": "THE EARTH WAS WITHOUT FORM", "u3": "IT'S A QUICK BROWN FOX"}
HYPS = {"u1": ["AND GOD SAW THE LIGHT", "AND GOD SAW THE NIGHT"],
        "u2": ["THE EARTH WAS VOID", "THE EARTH WAS WITHOUT FORM"],
        "u3": ["IT'S A QUICK BROWN FOX", "IT'S A QUICK BROWN BOX"]}


def espnet_set(directory: Path) -> Path:
    """An N-best set in ESPnet's layout (raw_hypotheses/<k>best_recog/{text,score,scores}, references/)."""
    for rank in (1, 2):
        folder = directory / "raw_hypotheses" / f"{rank}best_recog"
        folder.mkdir(parents=True)
        hyps = {u: h[rank - 1] for u, h in HYPS.items()}
        (folder / "text").write_text("".join(f"{u} {t}\n" for u, t in hyps.items()))
        (folder / "score").write_text("".join(f"{u} tensor(-{rank + i}.5)\n" for i, u in enumerate(hyps)))
        (folder / "scores").write_text("".join(
            f'{u} {{"decoder": "tensor(-{rank}.0)", "ctc": "tensor(-{i}.0)", "lm": "tensor(-{rank + i}.0)"}}\n'
            for i, u in enumerate(hyps)))
    (directory / "references").mkdir()
    (directory / "references" / "ref_wer.trn").write_text("".join(f"{t}\t({u})\n" for u, t in REFS.items()))
    return directory


@pytest.fixture
def sets(tmp_path):
    return espnet_set(tmp_path / "in" / "dev_a"), espnet_set(tmp_path / "in" / "dev_b")


# 1. No command replaces an input or a file it did not create

def test_subset_nbest_never_writes_its_source(sets, tmp_path):
    source = sets[0]
    before = snapshot(tmp_path)
    for dst, how in ((source, "is"), (source / "raw_hypotheses" / "sub", "is inside"), (tmp_path / "in", "contains")):
        expect_error(cli("subset_nbest", source, dst, "--every", "2"), "slm-subset-nbest",
                     f"DST_DIR {dst}: {how} the input {source}")
    assert snapshot(tmp_path) == before


def test_subset_nbest_replaces_only_an_earlier_subset(sets, tmp_path):
    source, user = sets[0], tmp_path / "mine"
    (user / "references").mkdir(parents=True)
    (user / "references" / "ref_wer.trn").write_text("my notes\n")
    expect_error(cli("subset_nbest", source, user, "--every", "2"), "slm-subset-nbest",
                 f"{user / 'references'}: not written by slm-subset-nbest")
    assert (user / "references" / "ref_wer.trn").read_text() == "my notes\n"
    out = tmp_path / "sub"
    for every in ("2", "1"):  # a second run replaces the first one's subset
        result = cli("subset_nbest", source, out, "--every", every)
        assert result.returncode == 0 and not result.stderr, result.stderr
    assert (out / "raw_hypotheses" / "2best_recog" / "text").read_text().count("\n") == 3
    assert json.loads((out / "subset.json").read_text())["every"] == 1
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary directory left


@pytest.mark.parametrize("target", ["references/ref_wer.trn", "raw_hypotheses/1best_recog/text", "."])
def test_pairwise_preference_never_writes_over_a_set(sets, tmp_path, target):
    before = snapshot(tmp_path)
    out = sets[0] / target
    result = cli("pairwise_preference", "--set", sets[0], "--set", sets[1], "--lm", "score:lm", "--nbest", "2",
                 "--out", out)
    expect_error(result, "slm-pairwise-preference", f"--out {out}: ", f"the input {sets[0]}")
    assert snapshot(tmp_path) == before


def test_pairwise_preference_writes_through_a_link(sets, tmp_path):
    (tmp_path / "tables").mkdir()
    link = tmp_path / "pairs.md"
    link.symlink_to(tmp_path / "tables" / "pairs.md")
    result = cli("pairwise_preference", "--set", sets[0], "--lm", "score:lm", "--nbest", "2", "--out", link)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and (tmp_path / "tables" / "pairs.md").read_text().startswith("| LM |")


@pytest.fixture
def two_models(tiny_model, tmp_path):
    return [shutil.copytree(tiny_model, tmp_path / name) for name in ("m1", "m2")]


@pytest.mark.parametrize("through_link", [False, True])
def test_average_models_never_replaces_a_users_model(two_models, tiny_model, tmp_path, through_link):
    mine = shutil.copytree(tiny_model, tmp_path / "mine")
    out = mine
    if through_link:
        out = tmp_path / "link"
        out.symlink_to(mine)
    before = snapshot(tmp_path)
    result = cli("average_models", "--model", two_models[0], "--model", two_models[1], "--out", out)
    expect_error(result, "slm-average-models", f"{out}/config.json: not written by slm-average-models")
    assert snapshot(tmp_path) == before and out.is_symlink() == through_link
    for model in (two_models[0], tmp_path):  # a model itself; a directory holding one
        result = cli("average_models", "--model", two_models[0], "--model", two_models[1], "--out", model)
        expect_error(result, "slm-average-models", f"--out {model}: ", "the input")
    assert snapshot(tmp_path) == before


def test_average_models_replaces_an_earlier_average_through_a_link(two_models, tmp_path):
    (tmp_path / "avg").mkdir()
    (tmp_path / "avg" / "notes.txt").write_text("mine\n")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "avg")
    for _ in range(2):
        result = cli("average_models", "--model", two_models[0], "--model", two_models[1], "--out", link)
        assert result.returncode == 0 and not result.stderr, result.stderr
    assert link.is_symlink() and (tmp_path / "avg" / "notes.txt").read_text() == "mine\n"
    assert json.loads((tmp_path / "avg" / "training.json").read_text())["averaged_from"] == [str(m) for m in two_models]
    assert not [p for p in tmp_path.rglob(".*")]  # no temporary directory left


def test_lm_combination_never_replaces_a_users_table(sets, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "combination.md").write_text("my table\n")
    argv = ["--dev", f"{sets[0]},{sets[1]}", "--lm", "score:lm", "--lambda-range", "0:1:0.5", "--no-progress"]
    result = cli("lm_combination", *argv, "--out", out)
    expect_error(result, "slm-lm-combination", f"{out / 'combination.md'}: not written by slm-lm-combination")
    assert [p.name for p in out.iterdir()] == ["combination.md"] and (out / "combination.md").read_text() == "my table\n"
    expect_error(cli("lm_combination", *argv, "--out", sets[0]), "slm-lm-combination", f"--out {sets[0]}: is the input")
    fresh = tmp_path / "fresh"
    for _ in range(2):  # its own table is replaced
        result = cli("lm_combination", *argv, "--out", fresh)
        assert result.returncode == 0 and not result.stderr, result.stderr
    assert (fresh / "combination.md").read_text().startswith("| system |")


# 2. Every console script exits 0 after a good run, with nothing on stderr but progress

def console_scripts() -> dict:
    """{command: "module:function"} of setup.cfg."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict(tuple(part.strip() for part in line.split("=")) for line in lines)


def console(command, *args, cwd=None):
    """Run `command` as its installed console script does: sys.exit(function()), argv[0] the command."""
    module, function = console_scripts()[command].split(":")
    code = (f"import sys; sys.argv[0] = {command!r}; from {module} import {function}; sys.exit({function}())")
    return run(sys.executable, "-c", code, *args, cwd=cwd)


# stderr lines a good run may print: progress bars (tqdm's), summaries, and ESPnet's log
PROGRESS_BAR = r"\s*|[\w .]+: +(\d+%\|.*|\d+\w+ \[.*)"  # blank: a bar erased when it closed
PROGRESS = {"slm-score": r"slm-score: scored \d+ sentences .*", "slm-lm-train": r".*"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A saved tiny SLM (random weights) whose tokenizer knows every letter (BLiMP and the N-best lists)."""
    from slm_lm import build_lm
    from slm_lm.model.bpe import train_bpe
    from slm_lm.scoring.scorer import Scorer

    d = tmp_path_factory.mktemp("model")
    (d / "text.txt").write_text((TEXT + "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG\n") * 30)
    tokenizer = train_bpe(d / "text.txt", d / "bpe", vocab_size=60)
    model = build_lm("slm", tokenizer.vocab_size, size="tiny", max_positions=1024)
    Scorer(model, tokenizer).save_pretrained(d / "slm")
    return d / "slm"


@pytest.fixture(scope="module")
def good_inputs(tmp_path_factory):
    """Input files every command can run on."""
    d = tmp_path_factory.mktemp("good")
    (d / "text.txt").write_text(TEXT * 30)
    espnet_set(d / "dev_a")
    espnet_set(d / "dev_b")
    tsv, ref = nbest_tsv(d / "tsv")
    (d / "blimp").mkdir()
    (d / "blimp" / "anaphor_gender_agreement.jsonl").write_text(
        blimp_record(sentence_good="And God saw the light.", sentence_bad="And God saw the night.") + "\n")
    (d / "hyp_a").write_text("".join(f"{u} {h[0]}\n" for u, h in HYPS.items()))
    (d / "hyp_b").write_text("".join(f"{u} {h[1]}\n" for u, h in HYPS.items()))
    (d / "ref").write_text("".join(f"{u} {t}\n" for u, t in REFS.items()))
    (d / "mt.nbest").write_text("0 ||| the light ||| MT= -1 ||| -1\n0 ||| the night ||| MT= -2 ||| -2\n"
                                "1 ||| and god saw ||| MT= -1 ||| -1\n1 ||| and god was ||| MT= -3 ||| -3\n")
    (d / "mt.ref").write_text("the light\nand god saw\n")
    (d / "reviews.tsv").write_text("sentence\tlabel\ngood light\t1\nbad night\t0\n")
    return d, tsv, ref


def good_argv(command, d, tsv, ref, model, out):
    sets = f"{d / 'dev_a'},{d / 'dev_b'}"
    return {
        "slm-score": ["--model", model, "--input", d / "text.txt", "--output", out / "scores.tsv"],
        "slm-prepare-lm-text": ["--books", d / "text.txt", "--normalized", "--out", out / "train.txt"],
        "slm-train-bpe": ["--text", d / "text.txt", "--vocab-size", "40", "--out", out / "bpe"],
        "slm-blimp": ["--model", model, "--data", d / "blimp", "--out", out / "blimp", "--no-progress"],
        "slm-rescore": ["--dev", tsv, "--dev-ref", ref, "--lm", model, "--lambda-range", "0:1:0.5", "--out",
                        out / "rescore", "--no-progress"],
        "slm-init-slm": ["--from", model, "--kind", "slm", "--out", out / "init"],
        "slm-average-models": ["--model", model, "--model", model, "--out", out / "avg"],
        "slm-model-card": ["check", model, "--lambda", "0.5", "--dir", MIRROR],
        "slm-compare-wer": ["--ref", d / "ref", "--hyp", f"A={d / 'hyp_a'}", "--hyp", f"B={d / 'hyp_b'}",
                            "--samples", "100"],
        "slm-lm-combination": ["--dev", sets, "--lm", "score:lm", "--lambda-range", "0:1:0.5", "--out",
                               out / "combination", "--no-progress"],
        "slm-pairwise-preference": ["--set", d / "dev_a", "--lm", "score:lm", "--nbest", "2", "--out", out / "pairs.md"],
        "slm-subset-nbest": [d / "dev_a", out / "subset", "--every", "2"],
        "slm-simulate-nbest": ["--confusions", sets, "--text", d / "text.txt", "--variants", "1", "--out", out / "sim"],
        "slm-rescore-mt": ["--dev", d / "mt.nbest", "--dev-ref", d / "mt.ref", "--lm", model, "--lambda-range",
                           "0:1:0.5", "--bootstrap-samples", "10", "--out", out / "mt", "--no-progress"],
        "slm-zero-shot": ["--data", d / "reviews.tsv", "--labels", "0=negative,1=positive", "--pattern",
                          "{text} is {label}.", "--model", model, "--out", out / "pred.tsv", "--no-progress"],
        "slm-data": ["get", "blimp", "--dir", out / "data", "--mirror", MIRROR, "--no-progress"],
        "slm-mwer-train": ["--model", model, "--train", tsv, "--train-ref", ref, "--updates", "1", "--lambda", "0.5",
                           "--held-out", "0", "--out", out / "mwer", "--no-progress"],
    }[command]


# slm-am-scores needs an ESPnet ASR experiment: test_espnet_tools.py runs it as installed (exit 0, quiet stderr)
@pytest.mark.parametrize("command", sorted(set(console_scripts()) - {"slm-am-scores"}))
def test_every_console_script_exits_0_after_a_good_run(command, good_inputs, model, tmp_path):
    d, tsv, ref = good_inputs
    if command == "slm-pretrain":
        from test_bad_input import PRETRAIN_TINY

        data, out = tmp_path / "data", tmp_path / "run"
        results = [console(command, "encode", "--bpe-dir", model, "--text", d / "text.txt", "--out",
                           data / f"{name}.ids.xz") for name in ("train", "valid")]
        for name in ("bpe.model", "tokens.txt"):
            shutil.copy(model / name, data / name)
        results.append(console(command, "train", "--kind", "slm", "--data", data, "--out", out, "--updates", "2",
                               *PRETRAIN_TINY))
    elif command == "slm-lm-train":
        pytest.importorskip("espnet2")
        from test_espnet_lm import tiny_config

        from slm_lm.espnet_lm.data import write_espnet_text

        root = tmp_path / "espnet"
        write_espnet_text(d / "text.txt", root / "text", model / "bpe.model")
        text = f"{root}/text/text,text,text"
        results = [console(command, "--config", tiny_config(tmp_path, "slm", num_iters_per_epoch=2, max_epoch=1),
                           "--token_list", model / "tokens.txt", "--bpemodel", model / "bpe.model",
                           "--token_type", "bpe", "--train_data_path_and_name_and_type", text,
                           "--train_shape_file", root / "text" / "text_shape",
                           "--valid_data_path_and_name_and_type", text,
                           "--valid_shape_file", root / "text" / "text_shape", "--output_dir", tmp_path / "exp")]
    else:
        results = [console(command, *good_argv(command, d, tsv, ref, model, tmp_path))]
    for result in results:
        assert result.returncode == 0 and "Traceback" not in result.stderr, (command, result.stderr[-3000:])
        allowed = re.compile(f"{PROGRESS_BAR}|{PROGRESS.get(command, PROGRESS_BAR)}")
        noise = [line for line in result.stderr.splitlines() if not allowed.fullmatch(line)]
        assert not noise, (command, noise[:5])


# 3. Every numeric option is a finite number in its range (slm_lm.common.options.number), refused in one line

NUMERIC_OPTIONS = [
    ("score", [], ["--max-tokens"]),
    ("prepare_lm_text", [], ["--ngram", "--min-words", "--max-words", "--valid-every"]),
    ("train_bpe", [], ["--vocab-size", "--input-sentence-size", "--seed", "--num-threads"]),
    ("blimp", [], ["--limit", "--max-tokens"]),
    ("rescore", [], ["--nbest", "--max-grid-points"]),
    ("lm_combination", [], ["--nbest", "--max-grid-points"]),
    ("pretrain", ["encode"], ["--max-sentences"]),
    ("pretrain", ["train"], ["--minutes", "--updates", "--deadline", "--n-layers", "--d-model", "--n-heads", "--d-ff",
                             "--max-positions", "--dropout", "--lr", "--warmup", "--batch-tokens", "--valid-every",
                             "--valid-sentences", "--seed", "--threads", "--content-loss", "--content-sample"]),
    ("model_card", ["check", "slm-books"], ["--lambda"]),
    ("compare_wer", [], ["--samples", "--seed"]),
    ("pairwise_preference", [], ["--nbest"]),
    ("subset_nbest", ["src", "dst"], ["--every"]),
    ("simulate_nbest", [], ["--nbest", "--lists", "--variants", "--seed"]),
]


@pytest.mark.parametrize("module,prefix,option", [(m, p, o) for m, p, options in NUMERIC_OPTIONS for o in options])
def test_every_numeric_option_refuses_nan_inf_and_values_out_of_range(module, prefix, option, capsys):
    import importlib

    from slm_lm.common.errors import CommandError

    main = importlib.import_module(f"slm_lm.bin.{module}").main
    for value in ("nan", "inf", "-1", "1e400"):
        with pytest.raises(CommandError):
            main([*prefix, option, value])
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and f": error: argument {option}: {value}" in lines[0], (value, lines)
        assert re.search(r"must be|not an integer|not a number", lines[0]), lines[0]


def test_numeric_options_name_their_range(capsys):
    from slm_lm.bin import compare_wer, model_card, pretrain
    from slm_lm.common.errors import CommandError

    for main, argv, needle in (
            (compare_wer.main, ["--samples", "2000000"], "argument --samples: 2000000: must be 1 or more and at "
                                                         "most 1,000,000"),
            (pretrain.main, ["train", "--dropout", "1.5"], "argument --dropout: 1.5: must be 0 or more and at most 1"),
            (pretrain.main, ["train", "--lr", "0"], "argument --lr: 0: must be more than 0"),
            (model_card.main, ["check", "slm-books", "--lambda", "nan"], "argument --lambda: nan: must be a finite")):
        with pytest.raises(CommandError):
            main(argv)
        assert needle in capsys.readouterr().err


def test_no_numeric_option_bypasses_the_shared_type():
    """Every int or float option of the package is parsed by slm_lm.common.options.number."""
    package = ROOT / "slm_lm"
    found = [f"{p.relative_to(ROOT)}:{i}" for p in package.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\btype=(int|float)\b", line)]
    assert not found, found


# 4. Text that is not UTF-8 is reported at its line

@pytest.mark.parametrize("line", [2, 2001, 25001])
def test_text_that_is_not_utf8_is_reported_at_its_line(model, tmp_path, line):
    good = "AND GOD SAW THE LIGHT"
    lines = [f"u{i} {good}".encode() for i in range(1, 25002)]
    lines[line - 1] = f"u{line} AND ".encode() + b"\xff GOD"
    keyed = tmp_path / "keyed.txt"
    keyed.write_bytes(b"\n".join(lines) + b"\n")
    plain = tmp_path / "plain.txt"
    plain.write_bytes(b"\n".join(x.split(b" ", 1)[1] for x in lines) + b"\n")
    tsv = tmp_path / "nbest.tsv"
    tsv.write_bytes(b"\n".join(x.replace(b" ", b"\t1\t-1.0\t", 1) for x in lines) + b"\n")
    (tmp_path / "ref").write_text("".join(f"u{i} {good}\n" for i in range(1, 25002)))
    for name, result, path in (
            ("slm-score", cli("score", "--model", model, "--input", plain, "--output", tmp_path / "o.tsv"), plain),
            ("slm-pretrain", cli("pretrain", "encode", "--bpe-dir", model, "--text", plain, "--out",
                                 tmp_path / "x.ids.xz"), plain),
            ("slm-compare-wer", cli("compare_wer", "--ref", tmp_path / "ref", "--hyp", f"a={tmp_path / 'ref'}",
                                    "--hyp", f"b={keyed}"), keyed),
            ("slm-rescore", cli("rescore", "--dev", tsv, "--dev-ref", tmp_path / "ref", "--lm", "score:lm", "--out",
                                tmp_path / "out"), tsv)):
        assert result.returncode == 2, (name, result.stderr[-2000:])
        last = result.stderr.splitlines()[-1]  # slm-pretrain's progress bar may come first
        assert last.startswith(f"{name}: error: {path}:{line}: not UTF-8 text"), (name, last)


@pytest.mark.parametrize("command,argv", [
    ("blimp", ["--model", "{model}", "--data", "{data}", "--out", "{data}"]),
    ("pretrain", ["train", "--kind", "slm", "--data", "{data}", "--out", "{data}/run", "--updates", "1"]),
    ("pretrain", ["encode", "--bpe-dir", "{model}", "--text", "{data}/t.ids.xz", "--out", "{data}/t.ids.xz"]),
])
def test_older_commands_refuse_an_output_overlapping_an_input(model, tmp_path, command, argv):
    data = tmp_path / "data"
    data.mkdir()
    (data / "t.ids.xz").write_text(TEXT)
    before = snapshot(tmp_path)
    result = cli(command, *[a.format(model=model, data=data) for a in argv])
    expect_error(result, f"slm-{command}", "the input", "outputs never replace")
    assert snapshot(tmp_path) == before


# 5. Model and config files are regular files read with a size ceiling: a FIFO or /dev/zero neither hangs
# nor fills memory

@pytest.mark.parametrize("name,kind", [("config.json", "fifo"), ("tokens.txt", "fifo"), ("bpe.model", "fifo"),
                                       ("config.json", "zero"), ("tokens.txt", "zero"), ("bpe.model", "zero"),
                                       ("config.yaml", "fifo"), ("config.yaml", "zero")])
def test_a_fifo_or_dev_zero_as_a_model_file_is_one_line(model, tmp_path, name, kind):
    directory = tmp_path / "m"
    if name == "config.yaml":  # an ESPnet LM experiment: config.yaml and its weights
        directory.mkdir()
        (directory / "valid.loss.ave.pth").write_bytes(b"x")
    else:
        shutil.copytree(model, directory)
        (directory / name).unlink()
    if kind == "fifo":
        os.mkfifo(directory / name)
    else:
        (directory / name).symlink_to("/dev/zero")
    (tmp_path / "in.txt").write_text(TEXT)
    result = cli("score", "--model", directory, "--input", tmp_path / "in.txt")  # a hang: killed after 600 s
    expect_error(result, "slm-score", f"{directory / name}: not a regular file")


# Memory is bounded by a ceiling on the work, named in the message, before any scoring

@pytest.mark.parametrize("extra,needle", [
    (["--search", "grid", "--lambda-range", "0:5:0.001"],  # 2 LMs x 5,001 values: a MemoryError at 4 GB
     "--search grid: 25,010,001 grid points (5,001 x 5,001 x 1 values of lambda per LM and beta), above the "
     "ceiling of 1,000,000; use coarser ranges or --search coordinate"),
    (["--lambda-range", "0:5:0.0001", "--length-norm", "gnmt", "--ln-alpha-range", "0:1:0.0001"],
     "--search coordinate: 1,000,120,003 points per sweep (each LM's lambdas times its alphas, and the betas), "
     "above the ceiling of 1,000,000; use coarser ranges"),
])
def test_rescore_refuses_a_search_beyond_its_ceiling(sets, tmp_path, capsys, extra, needle):
    from slm_lm.bin import rescore

    with pytest.raises(SystemExit) as exit_info:
        rescore.main(["--dev", str(sets[0]), "--lm", "score:lm", "--lm", "score:ctc", "--out", str(tmp_path / "out"),
                      "--no-progress", *extra])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"slm-rescore: error: {needle}\n"


def test_rescore_mt_refuses_more_bootstrap_draws_than_its_ceiling(tmp_path, capsys):
    from slm_lm.bin import rescore_mt

    refs = [f"sentence number {i} ." for i in range(25)]
    (tmp_path / "dev.nbest").write_text("".join(f"{i} ||| {r} ||| MT= -1 ||| -1\n" for i, r in enumerate(refs)))
    (tmp_path / "ref.txt").write_text("".join(r + "\n" for r in refs))
    with pytest.raises(SystemExit) as exit_info:
        rescore_mt.main(["--dev", str(tmp_path / "dev.nbest"), "--dev-ref", str(tmp_path / "ref.txt"), "--lm",
                         "score:MT", "--bootstrap-samples", "1000000", "--out", str(tmp_path / "out"), "--no-progress"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "slm-rescore-mt: error: --bootstrap-samples 1,000,000: 1,000,000 resamples of the 25 sentences of set dev "
        "are 25,000,000 draws, above the ceiling of 20,000,000 (sacrebleu holds them all in memory); give fewer "
        "resamples\n")


# One line, not a traceback

@pytest.mark.parametrize("cache,needle", [
    ("file", "--cache {c}: is a file, not a directory"),
    ("file/sub", "--cache {c}: cannot write: {t}/file is a file, not a directory"),
])
def test_rescore_cache_that_is_a_file_is_one_line(sets, tmp_path, capsys, cache, needle):
    from slm_lm.bin import rescore

    (tmp_path / "file").write_text("mine\n")
    with pytest.raises(SystemExit) as exit_info:
        rescore.main(["--dev", str(sets[0]), "--lm", "score:lm", "--out", str(tmp_path / "out"), "--no-progress",
                      "--cache", str(tmp_path / cache)])
    assert exit_info.value.code == 2
    expected = needle.format(c=tmp_path / cache, t=tmp_path)
    assert capsys.readouterr().err == f"slm-rescore: error: {expected}\n"
    assert (tmp_path / "file").read_text() == "mine\n"


def test_compare_wer_references_without_words_are_one_line(tmp_path, capsys):
    from slm_lm.bin import compare_wer

    (tmp_path / "ref.txt").write_text("u1\nu2 \n")
    with pytest.raises(SystemExit) as exit_info:
        compare_wer.main(["--ref", str(tmp_path / "ref.txt"), "--hyp", f"a={tmp_path / 'ref.txt'}",
                          "--hyp", f"b={tmp_path / 'ref.txt'}"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (f"slm-compare-wer: error: {tmp_path / 'ref.txt'}: the references have no "
                                       "words (2 utterances): no WER to compare\n")


@pytest.mark.parametrize("blimp,tuning,name,needle", [
    ('{"pairs": 1}', None, "x", "{b}: not a slm-blimp output: KeyError 'overall' reading it"),
    ('[]', None, "x", "{b}: expected a JSON object, got list"),
    (None, '{"sets": {"a": 1}, "best": {}}', "x", "{r}: not a slm-rescore output: TypeError string indices must be "
                                                  "integers, not 'str' reading it"),
    (None, '{"sets": [{"role": "dev"}], "best": {}}', "x",
     "{r}: not a slm-rescore output: IndexError list index out of range reading it"),
    (None, None, "../escape", "--name '../escape': want a model name (letters, digits, '.', '_', '-')"),
])
def test_model_card_make_inputs_of_another_shape_are_one_line(tmp_path, capsys, blimp, tuning, name, needle):
    from slm_lm.bin import model_card

    good_blimp = '{"pairs": 2, "overall": 50.0, "phenomena": {}}'
    good_tuning = ('{"sets": [{"role": "dev", "name": "dev_other"}, {"role": "test", "name": "t", "wer_am": 1, '
                   '"wer_rescored": 1, "wer_file": 1, "wer_oracle": 1}], "best": {"lambdas": [0.5]}}')
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "training.json").write_text("{}")
    (tmp_path / "bl").mkdir()
    (tmp_path / "bl" / "blimp_results.json").write_text(blimp or good_blimp)
    (tmp_path / "rs").mkdir()
    (tmp_path / "rs" / "tuning.json").write_text(tuning or good_tuning)
    with pytest.raises(SystemExit) as exit_info:
        model_card.main(["make", "--model", str(tmp_path / "model"), "--name", name, "--blimp", str(tmp_path / "bl"),
                         "--rescore", str(tmp_path / "rs"), "--command", "c"])
    assert exit_info.value.code == 2
    expected = needle.format(b=tmp_path / "bl" / "blimp_results.json", r=tmp_path / "rs" / "tuning.json")
    assert capsys.readouterr().err == f"slm-model-card: error: {expected}\n"


@pytest.mark.parametrize("command", ["pairwise_preference", "score"])
def test_an_output_that_is_a_fifo_is_refused_not_replaced(sets, tmp_path, capsys, command):
    """A device or FIFO named as an output file stays what it is (it was replaced by a regular file)."""
    from slm_lm.bin import pairwise_preference, score

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "in.txt").write_text("AND GOD SAW THE LIGHT\n")
    argv = {"pairwise_preference": ["--set", str(sets[0]), "--lm", "score:lm", "--nbest", "2", "--out", str(fifo)],
            "score": ["--model", "slm-books", "--input", str(tmp_path / "in.txt"), "--output", str(fifo)]}[command]
    with pytest.raises(SystemExit) as exit_info:
        {"pairwise_preference": pairwise_preference, "score": score}[command].main(argv)
    assert exit_info.value.code == 2
    option = "--out" if command == "pairwise_preference" else "--output"
    assert capsys.readouterr().err.endswith(f"error: {option} {fifo}: not a regular file (a device, FIFO or socket); "
                                            "outputs are written to a temporary file renamed into place, which "
                                            "would replace it: name a file\n")
    assert fifo.is_fifo()


def test_model_card_make_replaces_only_an_earlier_card(tmp_path, monkeypatch, capsys):
    """slm-model-card make writes the shipped directory by the shared output rules: an earlier card of the
    name is replaced, a file of yours beside it kept, a directory of yours of that name (no card.json) refused."""
    from slm_lm import pretrained
    from slm_lm.bin import model_card

    monkeypatch.setattr(pretrained, "ROOT", tmp_path / "pretrained")
    (tmp_path / "pretrained").mkdir()
    monkeypatch.setattr(model_card, "check_figures", lambda spec, lam, data=None: {"lambda": lam})
    shutil.copytree(ROOT / "slm_lm" / "pretrained" / "slm-books", tmp_path / "model")
    training = json.loads((tmp_path / "model" / "training.json").read_text())
    (tmp_path / "model" / "training.json").write_text(json.dumps({**training, "init": None}))
    (tmp_path / "bl").mkdir()
    (tmp_path / "bl" / "blimp_results.json").write_text('{"pairs": 2, "overall": 50.0, "phenomena": {}}')
    (tmp_path / "rs").mkdir()
    (tmp_path / "rs" / "tuning.json").write_text(
        '{"sets": [{"role": "dev", "name": "dev_other"}, {"role": "test", "name": "t", "wer_am": 1, '
        '"wer_rescored": 1, "wer_file": 1, "wer_oracle": 1}], "best": {"lambdas": [0.5]}}')
    argv = ["make", "--model", str(tmp_path / "model"), "--blimp", str(tmp_path / "bl"), "--rescore",
            str(tmp_path / "rs"), "--command", "c", "--name"]
    model_card.main(argv + ["mine"])
    dest = tmp_path / "pretrained" / "mine"
    (dest / "notes.txt").write_text("mine\n")
    model_card.main(argv + ["mine"])
    assert sorted(p.name for p in dest.iterdir()) == sorted([*model_card.MODEL_FILES, "card.json", "README.md",
                                                             "notes.txt"])
    (dest / "card.json").unlink()  # now a directory of yours
    with pytest.raises(SystemExit):
        model_card.main(argv + ["mine"])
    assert capsys.readouterr().err.startswith(f"slm-model-card: error: {dest / 'model.safetensors'}: not written "
                                              "by slm-model-card")
    assert (dest / "notes.txt").read_text() == "mine\n"


def test_average_models_killed_while_writing_leaves_no_temporary_directory(two_models, tmp_path):
    """SIGKILL while the average is moved into OUT leaves a journal (.slm-average-models.*.swap); the next run
    finishes it or deletes it first: OUT then holds the averaged model and nothing else."""
    import signal

    from slm_lm.bin import average_models

    out = tmp_path / "avg"
    pid = os.fork()
    if pid == 0:
        try:
            rename = os.rename

            def killed_rename(src, dst):  # the third move into OUT: part of the model is in place
                killed_rename.count = getattr(killed_rename, "count", 0) + 1
                if killed_rename.count == 3:
                    os.kill(os.getpid(), signal.SIGKILL)
                rename(src, dst)

            os.rename = killed_rename
            average_models.average_models([two_models[0], two_models[1]], out)
        finally:
            os._exit(0)
    assert os.WIFSIGNALED(os.waitpid(pid, 0)[1])
    assert any(p.name.startswith(".slm-average-models.") for p in out.iterdir())
    average_models.average_models([two_models[0], two_models[1]], out)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["model.safetensors", "config.json", "training.json", "bpe.model", "tokens.txt"])
