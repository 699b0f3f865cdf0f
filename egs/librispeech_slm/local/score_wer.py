#!/usr/bin/env python3
"""Score a decoding directory as ESPnet's asr.sh does: ``<dir>/text`` (the 1-best, from
``<dir>/1best_recog/text``), ``<dir>/score_wer/{ref,hyp}.trn`` (sclite trn, ``words\\t(spk-uttid)``)
and ``<dir>/score_wer/result.txt``, the WER summary (ESPnet's columns, jiwer alignments); the same for the CER
in ``<dir>/score_cer/`` (characters, ``<space>`` for a space, as asr.sh's score_cer).

    score_wer.py --data data/dev_clean exp/asr_x/decode_asr_beam10_asr_model_valid.acc.ave/dev_clean
"""
import argparse
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import write_atomic
from slm_lm.rescoring.transcripts import read_text
from slm_lm.rescoring.wer import align_transcripts, char_tokens, wer_columns, wer_table


def trn(rows, spk):
    """sclite trn lines: `words<TAB>(spk-uttid)`, sorted by utterance."""
    return "".join(f"{rows[u]}\t({spk.get(u, u.split('-')[0])}-{u})\n" for u in sorted(rows))


def check_outputs(decode, data):
    """InputError if an output of `score_dir` (decode/text, decode/score_wer/) is or holds an input
    (data/text, data/utt2spk, decode/1best_recog/text): e.g. the same directory for both."""
    inputs = [data / "text", data / "utt2spk", decode / "1best_recog" / "text"]
    for output in (decode / "text", decode / "score_wer"):
        out = output.resolve()
        for path in inputs:
            if out == path.resolve() or out in path.resolve().parents:
                raise InputError(f"{output}: would replace the input {path}; give the decoding directory and "
                                 "the data directory apart")


def score_dir(decode, data):
    """Write text, score_wer/{ref,hyp}.trn and score_wer/result.txt of one decoded set; return its counts."""
    refs = read_text(data / "text")
    spk = read_text(data / "utt2spk") if (data / "utt2spk").is_file() else {}
    hyps = read_text(decode / "1best_recog" / "text")
    c = wer_columns(align_transcripts(refs, hyps, decode / "1best_recog" / "text"))
    write_atomic(decode / "text", "".join(f"{u} {hyps[u]}".rstrip() + "\n" for u in sorted(hyps)))
    write_atomic(decode / "score_wer" / "ref.trn", trn(refs, spk))
    write_atomic(decode / "score_wer" / "hyp.trn", trn(hyps, spk))
    write_atomic(decode / "score_wer" / "result.txt", "\n".join(wer_table(f"WER, {decode.name}", [("Sum/Avg", c)])))
    score_cer(decode, refs, hyps, spk)
    return c


def score_cer(decode, refs, hyps, spk):
    """Write score_cer/{ref,hyp}.trn and score_cer/result.txt (ESPnet's CER table) of one decoded set."""
    refs, hyps = char_tokens(refs), char_tokens(hyps)
    c = wer_columns(align_transcripts(refs, hyps, decode / "1best_recog" / "text"))
    write_atomic(decode / "score_cer" / "ref.trn", trn(refs, spk))
    write_atomic(decode / "score_cer" / "hyp.trn", trn(hyps, spk))
    write_atomic(decode / "score_cer" / "result.txt", "\n".join(wer_table(f"CER, {decode.name}", [("Sum/Avg", c)])))


def main(argv=None):
    """Command line: score the given decoding directories against one data directory."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="data directory with text (and utt2spk)")
    p.add_argument("dirs", nargs="+", help="decoding directories with 1best_recog/text")
    args = p.parse_args(argv)
    for d in args.dirs:
        check_outputs(Path(d), Path(args.data))
    for d in args.dirs:
        c = score_dir(Path(d), Path(args.data))
        print(f"{d}: WER {c['Err']:.2f} % ({c['Snt']} utterances, {c['Wrd']} words)")


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        fail("score_wer.py", e)
