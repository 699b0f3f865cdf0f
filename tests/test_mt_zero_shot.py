"""MT N-best reranking for BLEU (slm-rescore-mt) and zero-shot ranking classification (slm-zero-shot), on
small hand-made lists and texts whose answers are known; BLEU checked against sacrebleu's own CLI."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from slm_lm.common.errors import InputError
from slm_lm.evaluation.zero_shot import Example, classify, fill
from slm_lm.rescoring import bleu
from slm_lm.rescoring.mt_nbest import load_mt_nbest, remove_bpe

ROOT = Path(__file__).resolve().parents[1]

REFS = ["the cat sat on the mat .", "he went to the market yesterday .", "she reads a book every night ."]
# per sentence: (hypothesis, MT score, LM score); the MT's best is scrambled, the LM prefers the reference
MOSES = [
    [("the mat sat on the cat .", -1.0, -9.0), ("the cat sat on the mat .", -1.5, -5.0)],
    [("he went to the market yesterday .", -2.0, -6.0), ("yesterday he go market to .", -2.2, -12.0)],
    [("reads she book a night every .", -1.0, -11.0), ("she reads a book every night .", -2.0, -6.0),
     ("she read book .", -3.0, -4.0)],
]
FAIRSEQ = """2026-01-01 | INFO | fairseq_cli.generate | loading model
S-1\ter ging gestern zum markt .
T-1\the went to the market yesterday .
H-1\t-0.30\the went to the mark@@ et yesterday .
D-1\t-0.30\the went to the market yesterday .
P-1\t-0.1 -0.2 -0.3
H-1\t-0.50\tyesterday he go market to .
D-1\t-0.50\tyesterday he go market to .
P-1\t-0.5 -0.5
S-0\tdie katze sass auf der matte .
H-0\t-0.20\tthe mat sat on the cat .
D-0\t-0.20\tthe mat sat on the cat .
P-0\t-1.0
H-0\t-0.25\tthe cat sat on the mat .
D-0\t-0.25\tthe cat sat on the mat .
P-0\t-2.0
Generate test with beam=2: BLEU4 = 10.00
"""


def run(module, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=600)


def write_moses(path: Path, lists=MOSES) -> Path:
    lines = [f"{i} ||| {text} ||| MT= {mt} LM= {lm} ||| {mt}" for i, hyps in enumerate(lists) for text, mt, lm in hyps]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_refs(path: Path, refs=REFS) -> Path:
    path.write_text("".join(r + "\n" for r in refs))
    return path


def test_moses_list_reranked_with_its_lm_feature_picks_the_references(tmp_path):
    dev, test = write_moses(tmp_path / "dev.nbest"), write_moses(tmp_path / "test.nbest")
    ref = write_refs(tmp_path / "ref.txt")
    out = tmp_path / "out"
    proc = run("slm_lm.bin.rescore_mt", "--dev", dev, "--dev-ref", ref, "--test", test, "--test-ref", ref,
               "--lm", "score:LM", "--lambda-range", "0:2:0.05", "--beta-range", "0", "--bootstrap-samples", "200",
               "--out", out, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    # lambda * LM must outweigh the MT margins: sentence 0 needs lambda > 0.125, sentence 2 > 0.2; at lambda
    # > 0.5 sentence 2 would switch to "she read book ." (LM -4): the smallest best lambda on the grid is 0.25
    record = json.loads((out / "tuning.json").read_text())
    assert record["best"]["lambdas"] == [0.25]
    assert (out / "test" / "rescored.txt").read_text().splitlines() == REFS
    assert (out / "test" / "baseline.txt").read_text().splitlines() == [h[0][0] for h in MOSES]
    test_row = next(s for s in record["sets"] if s["name"] == "test")
    assert test_row["rescored"] == pytest.approx(100.0) and test_row["oracle"] == pytest.approx(100.0)
    assert test_row["baseline"] < 60 and test_row["p_value"] < 0.05
    assert "nrefs:1|bs:200|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp" in proc.stdout
    assert "test (test): BLEU baseline" in proc.stdout and "rescored 100.00" in proc.stdout


def test_coordinate_descent_finds_the_same_bleu_weights(tmp_path):
    dev, ref = write_moses(tmp_path / "dev.nbest"), write_refs(tmp_path / "ref.txt")
    proc = run("slm_lm.bin.rescore_mt", "--dev", dev, "--dev-ref", ref, "--lm", "score:LM", "--search", "coordinate",
               "--bootstrap-samples", "10", "--out", tmp_path / "out", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "out" / "tuning.json").read_text())
    assert record["search"]["method"] == "coordinate" and record["best"]["lambdas"] == [0.25]
    assert record["best"]["beta"] == 0 and (tmp_path / "out" / "dev" / "rescored.txt").read_text().splitlines() == REFS


def test_rescore_mt_rerun_replaces_only_its_own_outputs(tmp_path):
    ref = write_refs(tmp_path / "ref.txt")
    first, second = write_moses(tmp_path / "first.nbest"), write_moses(tmp_path / "second.nbest")
    out = tmp_path / "out"
    common = ["--lm", "score:LM", "--beta-range", "0", "--bootstrap-samples", "10", "--out", out, "--no-progress"]
    assert run("slm_lm.bin.rescore_mt", "--dev", first, "--dev-ref", ref, *common).returncode == 0
    (out / "notes.txt").write_text("mine")
    proc = run("slm_lm.bin.rescore_mt", "--dev", second, "--dev-ref", ref, *common)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["RESULTS.md", "notes.txt", "second", "tuning.json"]
    (out / "third").mkdir()
    third = write_moses(tmp_path / "third.nbest")
    expect_error(run("slm_lm.bin.rescore_mt", "--dev", third, "--dev-ref", ref, *common), "slm-rescore-mt",
                 f"{out / 'third'}: not written by slm-rescore")


def test_corpus_bleu_from_summed_statistics_equals_sacrebleu_cli(tmp_path):
    hyps = ["the mat sat on the cat .", "he went to the market today .", "she reads one book each night ."]
    ref, hyp = write_refs(tmp_path / "ref.txt"), tmp_path / "hyp.txt"
    hyp.write_text("".join(h + "\n" for h in hyps))
    cli = subprocess.run([sys.executable, "-m", "sacrebleu", str(ref), "-i", str(hyp), "-b"], capture_output=True,
                         text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    metric = bleu.bleu_metric()
    ours = bleu.corpus_bleu(metric, bleu.hyp_stats(metric, REFS, hyps).sum(0)).score
    assert f"{ours:.1f}" == cli.stdout.strip()
    assert 0 < ours < 100


def test_bleu_is_the_tuned_metric_not_word_errors(tmp_path):
    """Two hypotheses with the same word errors but different BLEU: the BLEU tuning picks the better one."""
    refs = ["a b c d e f"]
    lists = [[("a b c d x y", -1.0, -3.0), ("x a b c d e", -2.0, -1.0)]]  # both 2 errors; 4-grams only in the second
    dev = write_moses(tmp_path / "dev.nbest", lists)
    ref = write_refs(tmp_path / "ref.txt", refs)
    proc = run("slm_lm.bin.rescore_mt", "--dev", dev, "--dev-ref", ref, "--lm", "score:LM", "--lambda-range", "0:1:0.5",
               "--beta-range", "0", "--bootstrap-samples", "10", "--out", tmp_path / "out", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "out" / "tuning.json").read_text())
    assert record["best"]["lambdas"] == [1.0]
    assert (tmp_path / "out" / "dev" / "rescored.txt").read_text() == "x a b c d e\n"


def test_fairseq_output_reads_d_lines_in_id_order_with_positional_sums(tmp_path):
    gen = tmp_path / "gen.txt"
    gen.write_text(FAIRSEQ)
    ref = write_refs(tmp_path / "ref.txt", REFS[:2])
    nbest = load_mt_nbest(gen, ref)
    assert list(nbest.hyps) == ["0", "1"]
    assert [h.text for h in nbest.hyps["1"]] == ["he went to the market yesterday .", "yesterday he go market to ."]
    assert nbest.hyps["1"][0].scores == {"fairseq": -0.30, "positional": pytest.approx(-0.6)}
    h_lines = load_mt_nbest(gen, ref, hyp_lines="H")  # H- text, @@ removed by default
    assert h_lines.hyps["1"][0].text == "he went to the market yesterday ."
    raw = load_mt_nbest(gen, ref, hyp_lines="H", bpe="none")
    assert raw.hyps["1"][0].text == "he went to the mark@@ et yesterday ."
    assert load_mt_nbest(gen, ref, nbest=1).n_hyps == 2


def test_remove_bpe_as_fairseq():
    assert remove_bpe("the mark@@ et is op@@ en@@ ed", "subword_nmt") == "the market is opened"
    assert remove_bpe("\u2581the \u2581mark et \u2581is", "sentencepiece") == "the market is"
    assert remove_bpe("a@@ b", "none") == "a@@ b"


def test_fairseq_rerank_end_to_end_with_a_shipped_lm(tmp_path):
    """The MT's best of both sentences is scrambled; clm-books prefers the fluent (reference) word order."""
    gen = tmp_path / "gen.txt"
    gen.write_text(FAIRSEQ)
    ref = write_refs(tmp_path / "ref.txt", REFS[:2])
    test = tmp_path / "test.txt"
    test.write_text(FAIRSEQ)
    proc = run("slm_lm.bin.rescore_mt", "--dev", gen, "--dev-ref", ref, "--test", test, "--test-ref", ref,
               "--lm", "clm-books", "--bootstrap-samples", "20", "--out", tmp_path / "out", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "test" / "rescored.txt").read_text().splitlines() == REFS[:2]
    assert (tmp_path / "out" / "test" / "baseline.txt").read_text().splitlines()[0] == "the mat sat on the cat ."
    assert list((tmp_path / "out" / "lm_cache").glob("*.jsonl"))


def test_zero_shot_classify_and_calibration():
    examples = [Example("good film", "1", "d:1"), Example("bad film", "0", "d:2")]
    words = {"0": "negative", "1": "positive"}
    pattern = "{text} is a {label} sentiment."
    table = {fill(pattern, "good film", "negative"): -10.0, fill(pattern, "good film", "positive"): -9.0,
             fill(pattern, "bad film", "negative"): -10.5, fill(pattern, "bad film", "positive"): -10.0,
             fill(pattern, "", "negative"): -8.0, fill(pattern, "", "positive"): -7.0}
    [result] = classify(examples, [pattern], words, table)
    assert result.predicted == ["1", "1"] and result.accuracy(examples) == 50.0
    # calibrated: good -2 vs -2 (tie -> first label "0"), bad -2.5 vs -3 -> "0"
    assert result.calibrated == ["0", "0"] and result.accuracy(examples, calibrated=True) == 50.0
    assert fill(pattern, "", "positive") == "is a positive sentiment."
    assert fill(pattern, "a {label} film", "positive") == "a {label} film is a positive sentiment."
    np.testing.assert_allclose(result.empty_scores, [-8.0, -7.0])


def test_zero_shot_command_prints_the_accuracy_of_its_predictions(tmp_path):
    data = tmp_path / "sst.jsonl"
    rows = [("a wonderful , moving film .", "positive"), ("a dull and tedious mess .", "negative"),
            ("the best film of the year .", "positive")]
    data.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in rows))
    out = tmp_path / "pred.tsv"
    proc = run("slm_lm.bin.zero_shot", "--data", data, "--labels", "negative,positive", "--pattern",
               "The sentiment of {text} is {label}.", "--pattern", "{text} is a {label} sentiment.",
               "--model", "clm-books", "--out", out, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    table = [line.split("\t") for line in out.read_text().splitlines()]
    assert table[0][:5] == ["where", "pattern", "gold", "predicted", "calibrated"] and len(table) == 1 + 2 * 3
    for pattern in ("The sentiment of {text} is {label}.", "{text} is a {label} sentiment."):
        mine = [r for r in table[1:] if r[1] == pattern]
        plain = 100.0 * sum(r[2] == r[3] for r in mine) / 3
        calibrated = 100.0 * sum(r[2] == r[4] for r in mine) / 3
        assert all(r[3] == ("negative", "positive")[float(r[6]) > float(r[5])] for r in mine)
        assert f"| {pattern} | {plain:.1f} | {calibrated:.1f} |" in proc.stdout


# bad input: one line `<command>: error: <file>[:<line>]: <problem>`, exit 2, no traceback

def expect_error(proc, command, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{command}: error: "), proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("case", ["short_ref", "bad_moses", "d_count", "tokenizer", "ref_count", "bpe_out"])
def test_rescore_mt_bad_input(tmp_path, case):
    dev, ref = write_moses(tmp_path / "dev.nbest"), write_refs(tmp_path / "ref.txt")
    args = ["--dev", dev, "--dev-ref", ref, "--lm", "score:LM", "--out", tmp_path / "out", "--no-progress"]
    needles = []
    if case == "short_ref":
        write_refs(ref, REFS[:2])
        needles = [f"{dev}:5", "utterance '2' has no reference"]
    elif case == "bad_moses":
        dev.write_text(dev.read_text() + "3 ||| a hypothesis without scores\n")
        needles = [f"{dev}:8", "want 'id ||| hypothesis ||| features ||| total score'"]
    elif case == "d_count":
        gen = tmp_path / "gen.txt"
        gen.write_text(FAIRSEQ.replace("D-1\t-0.50\tyesterday he go market to .\n", ""))
        args[1] = gen
        needles = [f"{gen}:4", "sentence 1 has 2 H- lines and 1 D- lines"]
    elif case == "tokenizer":
        args += ["--bleu-tokenize", "no-such"]
        needles = ["--bleu-tokenize 'no-such'"]
    elif case == "ref_count":
        args += ["--test", dev]
        needles = ["--test-ref: 0 reference files for 1 --test inputs"]
    elif case == "bpe_out":
        args[args.index("--out") + 1] = dev
        needles = [f"--out {dev}", "is the input"]
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    expect_error(run("slm_lm.bin.rescore_mt", *args), "slm-rescore-mt", *needles)
    assert {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("case", ["no_label_slot", "unknown_label", "bad_jsonl", "tsv_fields", "one_label",
                                  "out_is_data"])
def test_zero_shot_bad_input(tmp_path, case):
    data = tmp_path / "d.tsv"
    data.write_text("sentence\tlabel\ngood film\t1\nbad film\t0\n")
    args = ["--data", data, "--labels", "0=negative,1=positive", "--pattern", "{text} is {label}.",
            "--model", "clm-books", "--out", tmp_path / "pred.tsv", "--no-progress"]
    if case == "no_label_slot":
        args[args.index("--pattern") + 1] = "{text} is good."
        needles = ["--pattern '{text} is good.': want {label} exactly once"]
    elif case == "unknown_label":
        data.write_text("good film\t1\nso-so film\t2\n")
        needles = [f"{data}:2", "label '2' is not one of --labels"]
    elif case == "bad_jsonl":
        data = tmp_path / "d.jsonl"
        data.write_text('{"text": "good", "label": 1}\n{"txt": "bad"}\n')
        args[1] = data
        needles = [f"{data}:2", "want an object with 'text'"]
    elif case == "tsv_fields":
        data.write_text("good film\t1\nbad film\n")
        needles = [f"{data}:2", "want 2 tab-separated fields"]
    elif case == "one_label":
        args[args.index("--labels") + 1] = "positive"
        needles = ["--labels", "want at least two labels"]
    else:
        args[args.index("--out") + 1] = data
        needles = [f"--out {data} is the --data file"]
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    expect_error(run("slm_lm.bin.zero_shot", *args), "slm-zero-shot", *needles)
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_missing_sacrebleu_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "sacrebleu.metrics", None)
    with pytest.raises(InputError, match=r"pip install 'slm_lm\[mt\]'"):
        bleu.bleu_metric()


@pytest.mark.parametrize("spec", ["hf-causal:gpt2", "hf-masked:bert"])
def test_zero_shot_with_hugging_face_specs_writes_the_models_scores(tmp_path, spec):
    from test_hf import make_bert_dir, make_gpt2_dir

    from slm_lm.scoring.scorer import load_scorer

    kind, name = spec.split(":")
    model = (make_gpt2_dir if name == "gpt2" else make_bert_dir)(tmp_path / name)
    data = tmp_path / "d.tsv"
    data.write_text("the cat sat\tgood\na dog ran\tbad\n")
    out = tmp_path / "pred.tsv"
    proc = run("slm_lm.bin.zero_shot", "--data", data, "--labels", "bad,good", "--pattern", "{text} is {label}.",
               "--model", f"{kind}:{model}", "--out", out, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t") for line in out.read_text().splitlines()[1:]]
    scorer = load_scorer(f"{kind}:{model}")
    expected = scorer.score([fill("{text} is {label}.", t, w) for t in ("the cat sat", "a dog ran")
                             for w in ("bad", "good")])
    np.testing.assert_allclose([float(x) for r in rows for x in r[5:]], expected, atol=1e-3)
