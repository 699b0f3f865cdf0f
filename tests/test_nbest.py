"""Readers of N-best lists and references: every format, and every bad-input case."""

import json
import re
from pathlib import Path

import pytest

from slm_lm.common.errors import InputError
from slm_lm.rescoring.nbest import load_nbest, parse_score, read_espnet_nbest, read_mlm_json, read_tsv
from slm_lm.rescoring.transcripts import read_refs, read_text, read_trn

# utt -> [(text, total score, {component: score})] ordered by rank
NBEST = {
    "spk1-utt1": [("A B C", -1.0, {"decoder": -2.0, "ctc": -3.0}), ("A B", -2.0, {"decoder": -1.0, "ctc": -1.5})],
    "spk1-utt2": [("", -0.5, {"decoder": -0.2, "ctc": -0.1}), ("X", -0.7, {"decoder": -0.3, "ctc": -0.4})],
    "spk2-utt3": [("HELLO WORLD", -4.0, {"decoder": -5.0, "ctc": -6.0})],  # only one hypothesis
}
REFS = {"spk1-utt1": "A B C", "spk1-utt2": "X", "spk2-utt3": "HELLO WORD"}


def write_espnet(folder: Path, nbest=NBEST, tensor=True, with_scores=True) -> Path:
    """ESPnet <k>best_recog/{text,score,scores} from NBEST."""
    ranks = max(len(h) for h in nbest.values())
    for k in range(1, ranks + 1):
        d = folder / f"{k}best_recog"
        d.mkdir(parents=True)
        rows = [(u, h[k - 1]) for u, h in nbest.items() if len(h) >= k]
        (d / "text").write_text("".join(f"{u} {t}\n" for u, (t, _, _) in rows))
        fmt = (lambda v: f"tensor({v})") if tensor else str
        (d / "score").write_text("".join(f"{u} {fmt(s)}\n" for u, (_, s, _) in rows))
        if with_scores:
            lines = [f"{u} {json.dumps({k2: fmt(v) for k2, v in c.items()})}\n" for u, (_, _, c) in rows]
            (d / "scores").write_text("".join(lines))
    return folder


def write_trn(path: Path, refs=REFS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{t}\t({u.split('-')[0]}-{u})\n" for u, t in refs.items()))
    return path


def subset_dir(tmp_path: Path) -> Path:
    """The shared-data layout: raw_hypotheses/ + references/ref_wer.trn."""
    write_espnet(tmp_path / "myset" / "raw_hypotheses")
    write_trn(tmp_path / "myset" / "references" / "ref_wer.trn")
    return tmp_path / "myset"


def raises(match_parts, func, *args, **kwargs):
    """Assert InputError whose message contains every part (file names, line numbers, words)."""
    with pytest.raises(InputError) as info:
        func(*args, **kwargs)
    for part in match_parts:
        assert part in str(info.value), f"{part!r} not in {info.value}"
    return info.value


# ------------------------------------------------------------------------------- good input


def test_parse_score_variants():
    assert parse_score("-1.5", "f:1") == -1.5
    assert parse_score("tensor(-69.7726)", "f:1") == pytest.approx(-69.7726)
    assert parse_score("tensor(-0.5, device='cuda:0')", "f:1") == -0.5
    assert parse_score("tensor([-2.25])", "f:1") == -2.25
    assert parse_score(3, "f:1") == 3.0
    for bad in ["tensor(abc)", "", "nan", "inf", "1.0x"]:
        raises(["f:1"], parse_score, bad, "f:1")
    raises(["f:1", "not a number"], parse_score, None, "f:1")


def test_subset_layout_is_detected(tmp_path):
    s = load_nbest(subset_dir(tmp_path))
    assert s.name == "myset"
    assert list(s.hyps) == list(NBEST)
    assert s.refs == REFS  # trn ids "spk1-spk1-utt1" mapped to "spk1-utt1"
    assert s.n_hyps == 5
    h = s.hyps["spk1-utt1"][1]
    assert (h.rank, h.text, h.score, h.scores) == (2, "A B", -2.0, {"decoder": -1.0, "ctc": -1.5})
    assert s.hyps["spk1-utt2"][0].text == ""  # empty hypothesis is valid
    assert len(s.hyps["spk2-utt3"]) == 1  # fewer hypotheses than ranks is valid


def test_plain_decode_dir_with_explicit_kaldi_refs(tmp_path):
    write_espnet(tmp_path / "decode", tensor=False, with_scores=False)
    (tmp_path / "ref_text").write_text("".join(f"{u}  {t} \n" for u, t in REFS.items()))
    s = load_nbest(tmp_path / "decode", ref=tmp_path / "ref_text", nbest=1)
    assert [len(h) for h in s.hyps.values()] == [1, 1, 1]
    assert s.hyps["spk1-utt1"][0].scores == {}
    assert s.refs == REFS


def test_decode_dir_text_is_not_taken_as_reference(tmp_path):
    # In an ESPnet decode dir, `text` is the 1-best hypothesis file, so it must not be used as refs.
    d = write_espnet(tmp_path / "decode")
    (d / "text").write_text("spk1-utt1 A B C\n")
    raises(["decode", "no references"], load_nbest, d)


def test_espnet_score_wer_ref_trn_is_detected(tmp_path):
    d = write_espnet(tmp_path / "decode")
    write_trn(d / "score_wer" / "ref.trn")
    assert load_nbest(d).refs == REFS


def test_espnet_logdir_jobs_are_merged(tmp_path):
    d = tmp_path / "decode"
    items = list(NBEST.items())
    write_espnet(d / "logdir" / "output.1", dict(items[:2]))
    write_espnet(d / "logdir" / "output.2", dict(items[2:]))
    assert read_espnet_nbest(d).keys() == NBEST.keys()
    write_espnet(d / "logdir" / "output.3", dict(items[2:]))
    raises(["output.3", "duplicate id 'spk2-utt3'", "output.2"], read_espnet_nbest, d)


def test_token_file_used_when_text_missing(tmp_path):
    d = write_espnet(tmp_path / "dec", {"u1": [("HELLO WORLD", -1.0, {})]}, with_scores=False)
    (d / "1best_recog" / "text").unlink()
    (d / "1best_recog" / "token").write_text("u1 \u2581HEL LO \u2581WORLD\n")
    assert read_espnet_nbest(d)["u1"][0].text == "HELLO WORLD"


def test_nbest_truncation_and_too_many(tmp_path):
    d = write_espnet(tmp_path / "dec")
    assert max(len(h) for h in read_espnet_nbest(d, nbest=1).values()) == 1
    raises(["dec", "3-best", "only 2"], read_espnet_nbest, d, nbest=3)
    raises(["nbest must be >= 1"], read_espnet_nbest, d, nbest=0)


def test_read_refs_and_trn(tmp_path):
    trn = write_trn(tmp_path / "ref.trn")
    assert read_trn(trn) == REFS  # speaker prefix stripped without knowing the ids
    assert read_refs(trn, uttids=REFS.keys()) == REFS
    text = tmp_path / "text"
    text.write_text("u1 A  B\nu2\n")
    assert read_text(text) == {"u1": "A B", "u2": ""}
    assert read_refs(text) == {"u1": "A B", "u2": ""}


def test_mlm_json(tmp_path):
    data = {
        u: {"ref": REFS[u], **{f"hyp_{i + 1}": {"score": s, "text": t} for i, (t, s, _) in enumerate(h)}}
        for u, h in NBEST.items()
    }
    path = tmp_path / "dev-clean.am.json"
    path.write_text(json.dumps(data, indent=1))
    s = load_nbest(path)
    assert s.name == "dev-clean.am"
    assert s.refs == REFS
    assert [[(h.text, h.score) for h in hyps] for hyps in s.hyps.values()] == [
        [(t, sc) for t, sc, _ in h] for h in NBEST.values()
    ]
    hyps, refs = read_mlm_json(path, nbest=1)
    assert all(len(h) == 1 for h in hyps.values()) and refs == REFS


def test_tsv(tmp_path):
    path = tmp_path / "dev.tsv"
    lines = ["uttid\trank\tscore\ttext"]
    lines += [f"{u}\t{i + 1}\t{s}\t{t}" for u, h in NBEST.items() for i, (t, s, _) in enumerate(h)]
    path.write_text("\n".join(lines) + "\n")
    hyps = read_tsv(path)
    assert [[(h.rank, h.text, h.score) for h in v] for v in hyps.values()] == [
        [(i + 1, t, s) for i, (t, s, _) in enumerate(h)] for h in NBEST.values()
    ]
    s = load_nbest(path, ref=write_trn(tmp_path / "ref.trn"))
    assert s.refs == REFS and s.name == "dev"
    raises(["dev.tsv", "no references"], load_nbest, path)


def test_unique_texts_are_each_text_once_sorted(tmp_path):
    path = tmp_path / "dev.tsv"
    rows = [("u1", "B A", 0), ("u1", "A", -1), ("u2", "A", 0), ("u2", "C", -1)]
    path.write_text("uttid\trank\tscore\ttext\n" + "".join(
        f"{u}\t{i % 2 + 1}\t{s}\t{t}\n" for i, (u, t, s) in enumerate(rows)))
    (tmp_path / "ref.txt").write_text("u1 A\nu2 A\n")
    assert load_nbest(path, ref=tmp_path / "ref.txt").unique_texts() == ["A", "B A", "C"]


# ------------------------------------------------------------------------------- bad input


def test_missing_inputs(tmp_path):
    raises(["nothere", "not found"], load_nbest, tmp_path / "nothere")
    (tmp_path / "empty").mkdir()
    raises(["empty", "no <k>best_recog"], load_nbest, tmp_path / "empty")
    d = write_espnet(tmp_path / "dec")
    (d / "2best_recog" / "score").unlink()
    raises([str(d / "2best_recog" / "score"), "not found"], read_espnet_nbest, d)
    d2 = write_espnet(tmp_path / "dec2")
    raises(["missing.trn", "not found"], load_nbest, d2, ref=tmp_path / "missing.trn")
    (tmp_path / "x.csv").write_text("a")
    raises(["x.csv", "unknown N-best format"], load_nbest, tmp_path / "x.csv")


def test_rank_gaps(tmp_path):
    d = write_espnet(tmp_path / "dec")
    (d / "2best_recog").rename(d / "3best_recog")
    raises(["dec", "not 1..K", "2best_recog"], read_espnet_nbest, d)
    d2 = write_espnet(tmp_path / "dec2")  # spk2-utt3 has rank 1 only; give it a rank 3
    (d2 / "3best_recog").mkdir()
    for name, val in (("text", "spk2-utt3 Z"), ("score", "spk2-utt3 -9"), ("scores", 'spk2-utt3 {"decoder": -1}')):
        (d2 / "3best_recog" / name).write_text(val + "\n")
    raises(["3best_recog/text:1", "spk2-utt3", "rank 3 but no rank 2"], read_espnet_nbest, d2)


def test_score_file_problems(tmp_path):
    d = write_espnet(tmp_path / "dec")
    score = d / "1best_recog" / "score"
    score.write_text("spk1-utt1 tensor(-1.0)\nspk1-utt2 tensor(oops)\nspk2-utt3 -4\n")
    raises([f"{score}:2", "cannot parse score"], read_espnet_nbest, d)
    score.write_text("spk1-utt1 -1\nspk1-utt2 -1\n")
    raises([f"{d / '1best_recog' / 'text'}:3", "spk2-utt3", "no line in", str(score)], read_espnet_nbest, d)
    score.write_text("spk1-utt1 -1\nspk1-utt2 -1\nspk2-utt3 -4\nspk9-utt9 -1\n")
    raises([f"{score}:4", "spk9-utt9", "no line in"], read_espnet_nbest, d)
    score.write_text("spk1-utt1 -1\nspk1-utt2 -1\nspk2-utt3 -4\n")
    scores = d / "2best_recog" / "scores"
    scores.write_text('spk1-utt1 {"decoder": "tensor(-1)"}\nspk1-utt2 {"decoder": \n')
    raises([f"{scores}:2", "not a JSON object"], read_espnet_nbest, d)
    scores.write_text('spk1-utt1 {"decoder": "tensor(-1)"}\nspk1-utt2 {"decoder": "x"}\n')
    raises([f"{scores}:2", "decoder", "cannot parse"], read_espnet_nbest, d)


def test_duplicate_ids(tmp_path):
    d = write_espnet(tmp_path / "dec")
    text = d / "1best_recog" / "text"
    text.write_text(text.read_text() + "spk1-utt1 DUP\n")
    raises([f"{text}:4", "duplicate id 'spk1-utt1'", f"{text}:1"], read_espnet_nbest, d)
    trn = tmp_path / "dup.trn"
    trn.write_text("A\t(spk1-spk1-utt1)\nB\t(spk1-spk1-utt1)\n")
    raises([f"{trn}:2", "duplicate id"], read_trn, trn)
    kaldi = tmp_path / "dup_text"
    kaldi.write_text("u1 A\nu2 B\nu1 C\n")
    raises([f"{kaldi}:3", "duplicate id 'u1'"], read_text, kaldi)


def test_hypotheses_and_references_must_match(tmp_path):
    d = subset_dir(tmp_path)
    trn = d / "references" / "ref_wer.trn"
    write_trn(trn, {k: v for k, v in REFS.items() if k != "spk1-utt2"})
    e = raises(["spk1-utt2", "has no reference", str(trn)], load_nbest, d)
    assert re.search(r"1best_recog/text:2", str(e))
    write_trn(trn, {**REFS, "spk3-utt9": "EXTRA"})
    raises([f"{trn}:4", "spk3-spk3-utt9", "matches no hypothesis"], load_nbest, d)
    text = tmp_path / "ref_text"
    text.write_text("spk1-utt1 A B C\nspk1-utt2 X\nspk2-utt3 HELLO WORD\nspk3-utt9 EXTRA\n")
    raises([f"{text}:4", "spk3-utt9", "has no hypotheses"], load_nbest, d, ref=text)
    trn.write_text("NO PARENS HERE\n")
    raises([f"{trn}:1", "not a trn line"], load_nbest, d)


def test_bad_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n "u1": {"ref": "A",\n "hyp_1": {"score": -1, "text": "A"},}\n}')
    raises([str(path) + ":3", "invalid JSON"], read_mlm_json, path)
    path.write_text('{"u1": {"ref": "A", "hyp_1": {"score": -1, "text": "A"}},\n "u1": {"ref": "B"}}')
    raises([str(path), "duplicate key 'u1'"], read_mlm_json, path)
    cases = [
        ({"u1": {"hyp_1": {"score": -1, "text": "A"}}}, "missing reference"),
        ({"u1": {"ref": "A", "hyp_1": {"score": "abc", "text": "A"}}}, "cannot parse score"),
        ({"u1": {"ref": "A", "hyp_1": {"text": "A"}}}, "has no 'score'"),
        ({"u1": {"ref": "A", "hyp_1": {"score": -1}}}, "needs a 'text'"),
        ({"u1": {"ref": "A", "hyp_1": {"score": -1, "text": "A"}, "hyp_3": {"score": -1, "text": "A"}}},
         "not hyp_1..hyp_2"),
        ({"u1": {"ref": "A"}}, "no hypotheses"),
        ({"u1": {"ref": "A", "best": 1}}, "unexpected key 'best'"),
        ({"u1": "A"}, "must be an object"),
        (["u1"], "top level"),
    ]
    for data, message in cases:
        path.write_text("{\n" + json.dumps(data)[1:] if isinstance(data, dict) else json.dumps(data))
        parts = [str(path), message] + (["'u1'", ":2"] if isinstance(data, dict) else [])
        raises(parts, read_mlm_json, path)


def test_bad_tsv(tmp_path):
    path = tmp_path / "bad.tsv"
    cases = [
        ("u1\t1\t-1\tA\nu1\t1\t-2\tB\n", ":2", "duplicate rank 1"),
        ("u1\tone\t-1\tA\n", ":1", "not an integer"),
        ("u1\t0\t-1\tA\n", ":1", "rank must be >= 1"),
        ("u1\t1\tx\tA\n", ":1", "cannot parse score"),
        ("u1\t1\n", ":1", "expected 4 tab-separated fields"),
        ("u1\t1\t-1\tA\nu1\t3\t-1\tB\n", ":1", "ranks of 'u1' are not 1..2"),
        ("\t1\t-1\tA\n", ":1", "empty utterance id"),
    ]
    for content, line, message in cases:
        path.write_text(content)
        raises([f"{path}{line}", message], read_tsv, path)
    path.write_text("u1\t1\t-1\t\nu1\t2\t-2\n")  # empty hypotheses, with and without the last tab
    assert [h.text for h in read_tsv(path)["u1"]] == ["", ""]
    raises(["bad.tsv", "3-best"], read_tsv, path, nbest=3)
