"""BLiMP evaluation: reading the real files, judging pairs (ties = errors), table and CLI."""
import json
from pathlib import Path

import pytest
import torch

from conftest import MIRROR
from slm_lm import build_lm
from slm_lm.bin import blimp as blimp_cli
from slm_lm.evaluation.blimp import PHENOMENA, TERM_TO_PHENOMENON, load_blimp, read_paradigm, score_blimp, write_results
from slm_lm.model.bpe import train_bpe
from slm_lm.common.errors import InputError
from slm_lm.scoring.scorer import Scorer

BLIMP = MIRROR / "blimp"
# Slices of real files: the two tie paradigms (their identical pairs included), s-selection, a
# paradigm with `field` spelled "syntax/semantics", and a plain one.
SLICES = {
    "passive_1": [*range(0, 10), 324, 810],
    "principle_A_case_2": [*range(100, 110), 287],
    "animate_subject_passive": range(0, 10),
    "wh_island": range(0, 10),
}


class FakeScorer:
    """Shorter sentences score higher; records every sentence it is asked to score."""

    name = "fake-length"

    def __init__(self):
        self.seen = []

    def score(self, sentences, progress=False):
        self.seen.extend(sentences)
        return [-float(len(s)) for s in sentences]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("blimp")
    for name, rows in SLICES.items():
        lines = (BLIMP / f"{name}.jsonl").read_text().splitlines()
        (d / f"{name}.jsonl").write_text("\n".join(lines[i] for i in rows) + "\n")
    return d


def test_real_files_load_and_map_onto_the_12_columns():
    data = load_blimp(BLIMP)
    assert len(data) == 67 and sum(len(p) for p in data.values()) == 67000
    terms = {pairs[0].term for pairs in data.values()}
    assert len(terms) == 13 and {TERM_TO_PHENOMENON[t] for t in terms} == set(PHENOMENA)
    identical = sorted((p.paradigm, p.pair_id) for pairs in data.values() for p in pairs if p.good == p.bad)
    assert identical == [("passive_1", "324"), ("passive_1", "810")] + [
        ("principle_A_case_2", i) for i in ("105", "287", "372", "816", "967")]
    fields = {p.field for pairs in data.values() for p in pairs}
    assert fields == {"syntax", "morphology", "semantics", "syntax_semantics"}
    assert {TERM_TO_PHENOMENON[data[n][0].term] for n in ("animate_subject_passive", "animate_subject_trans")} == {"Arg. str"}


def test_pairs_judged_strictly_and_ties_reported(data_dir):
    data = load_blimp(data_dir)
    scorer = FakeScorer()
    results = score_blimp(scorer, data, progress=False)
    texts = [s for pairs in data.values() for p in pairs for s in (p.good, p.bad)]
    assert sorted(scorer.seen) == sorted(set(texts))  # every unique sentence scored exactly once
    pairs = [p for ps in data.values() for p in ps]
    expected_correct = sum(len(p.good) < len(p.bad) for p in pairs)
    expected_ties = [p for p in pairs if len(p.good) == len(p.bad)]
    assert results["pairs"] == len(pairs) == 43
    assert results["overall"] == pytest.approx(100.0 * expected_correct / len(pairs))
    assert results["ties"]["count"] == len(expected_ties)
    assert results["ties"]["identical_sentences"] == 4  # passive_1 324, 810; principle_A_case_2 105, 287
    by_name = {r["paradigm"]: r for r in results["per_paradigm"]}
    assert {t["pairID"] for t in by_name["passive_1"]["ties"] if t["identical"]} == {"324", "810"}
    assert by_name["principle_A_case_2"]["field"] == "syntax_semantics"
    arg = [p for p in pairs if p.paradigm in ("passive_1", "animate_subject_passive")]
    assert results["phenomena"]["Arg. str"] == pytest.approx(100.0 * sum(len(p.good) < len(p.bad) for p in arg) / len(arg))
    assert results["phenomena"]["NPI"] is None  # no NPI paradigm in the slice


def test_accuracy_split_by_length():
    data = load_blimp(BLIMP, paradigms=["expletive_it_object_raising"], limit=10)  # 2 fewer, 5 as many, 3 more
    pairs = [p for ps in data.values() for p in ps]
    words = lambda s: len(s.split())  # noqa: E731
    classes = {"fewer words than": [p for p in pairs if words(p.good) < words(p.bad)],
               "as many words as": [p for p in pairs if words(p.good) == words(p.bad)],
               "more words than": [p for p in pairs if words(p.good) > words(p.bad)]}
    assert all(classes.values())  # the slice has pairs of each kind
    results = score_blimp(FakeScorer(), data, progress=False)
    for length, members in classes.items():
        expected = 100.0 * sum(len(p.good) < len(p.bad) for p in members) / len(members)
        assert results["by_length"][length] == {"pairs": len(members), "accuracy": pytest.approx(expected)}
    assert results["by_length"]["fewer words than"]["accuracy"] > results["by_length"]["more words than"]["accuracy"]


def test_outputs_are_the_papers_table(data_dir, tmp_path):
    results = score_blimp(FakeScorer(), load_blimp(data_dir), progress=False)
    write_results(results, tmp_path, "fake")
    md = (tmp_path / "blimp_results.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Model"))
    assert header.count("|") == 15  # Model, Overall and the 12 phenomena
    row = next(line for line in md.splitlines() if line.startswith("| fake |"))
    assert f"{results['overall']:.1f}" in row and "| – |" in row
    assert "| BERT (base) (paper) | 84.2 |" in md
    for length, row in results["by_length"].items():
        accuracy = "–" if row["accuracy"] is None else f"{row['accuracy']:.1f}"  # the slice has no pair of one kind
        assert f"| {length} the bad one | {row['pairs']} | {accuracy} |" in md
    per_paradigm = json.loads((tmp_path / "blimp_paradigms.json").read_text())
    assert [r["paradigm"] for r in per_paradigm] == sorted(SLICES)
    summary = json.loads((tmp_path / "blimp_results.json").read_text())
    assert summary["overall"] == results["overall"] and "per_paradigm" not in summary


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    ('{"sentence_good": "A.", "field": "syntax"}', "missing field"),
    ('{"sentence_good": "A.", "sentence_bad": "", "field": "x", "linguistics_term": "binding", "UID": "bad", "pairID": "1"}',
     "sentence_bad must be a non-empty string"),
    ('{"sentence_good": "A.", "sentence_bad": "B.", "field": "x", "linguistics_term": "binding", "UID": "other", "pairID": "1"}',
     "UID 'other' differs from the file name 'bad'"),
    ('{"sentence_good": "A.", "sentence_bad": "B.", "field": "x", "linguistics_term": "syntax", "UID": "bad", "pairID": "1"}',
     "unknown linguistics_term"),
    ('{"sentence_good": "A.", "sentence_bad": "B.", "field": "x", "linguistics_term": "binding", "UID": "bad", "pairID": "0"}',
     "duplicate pairID 0 .first on line 1"),
    ('{"sentence_good": "A.", "sentence_bad": "B.", "field": "x", "linguistics_term": "ellipsis", "UID": "bad", "pairID": "1"}',
     "linguistics_term 'ellipsis' differs from 'binding' on line 1"),
])
def test_bad_lines_name_file_and_line(tmp_path, line, message):
    first = '{"sentence_good": "A.", "sentence_bad": "B.", "field": "x", "linguistics_term": "binding", "UID": "bad", "pairID": "0"}'
    (tmp_path / "bad.jsonl").write_text(first + "\n" + line + "\n")
    with pytest.raises(InputError, match=rf"bad.jsonl:2: {message}"):
        read_paradigm(tmp_path / "bad.jsonl")


def test_missing_inputs(tmp_path, data_dir):
    with pytest.raises(InputError, match="not found"):
        load_blimp(tmp_path / "nope")
    with pytest.raises(InputError, match="no \\*.jsonl"):
        load_blimp(tmp_path)
    with pytest.raises(InputError, match="no paradigm file.*'npi_present_9'"):
        load_blimp(data_dir, ["passive_1", "npi_present_9"])
    assert [len(p) for p in load_blimp(data_dir, ["passive_1"], limit=3).values()] == [3]


def test_cli_with_a_real_model_resumes_from_its_cache(data_dir, tmp_path, capsys, monkeypatch):
    text = tmp_path / "text.txt"
    text.write_text("THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG'S BACK\nSOME GRANDMOTHER WAS LEFT BY JAMES\n" * 20)
    tokenizer = train_bpe(text, tmp_path / "bpe", vocab_size=60)
    torch.manual_seed(0)
    Scorer(build_lm("slm", tokenizer.vocab_size, size="tiny", max_positions=72), tokenizer).save_pretrained(tmp_path / "slm")
    out = tmp_path / "out"
    args = ["--model", str(tmp_path / "slm"), "--data", str(data_dir), "--out", str(out), "--no-progress"]
    blimp_cli.main(args)
    printed = capsys.readouterr().out
    first = json.loads((out / "blimp_results.json").read_text())
    assert f"BLiMP overall accuracy {first['overall']:.2f}% over 43 pairs in 4 paradigms" in printed
    assert first["ties"]["identical_sentences"] == 4
    calls = []
    monkeypatch.setattr(Scorer, "score", lambda self, s, progress=False: calls.append(s) or [0.0] * len(s))
    blimp_cli.main(args + ["--label", "again"])
    assert calls == [] and json.loads((out / "blimp_results.json").read_text())["overall"] == first["overall"]
    assert "| again |" in (out / "blimp_results.md").read_text()
    with pytest.raises(SystemExit, match="--case applies to hf-causal"):
        blimp_cli.main(args + ["--case", "lower"])
    monkeypatch.undo()
    Scorer(build_lm("slm", tokenizer.vocab_size, size="tiny", max_positions=24), tokenizer).save_pretrained(tmp_path / "short")
    args[1] = str(tmp_path / "short")
    with pytest.raises(SystemExit, match=r"slm-blimp: error: .*/(passive_1|principle_A_case_2|animate_subject_passive|wh_island)"
                       r"\.jsonl:\d+: \d+ tokens exceed the model's limit of 22"):
        blimp_cli.main(args)

