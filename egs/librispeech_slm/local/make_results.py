#!/usr/bin/env python3
"""Write RESULTS.md in ESPnet's style: per set, the WER of the AM-only 1-best (baseline), of each
rescored 1-best and of the 10-best oracle (and a CER summary beside), with ESPnet's |Snt|Wrd|Corr|Sub|Del|Ins|Err|S.Err| columns
(jiwer alignments) and a summary table; then each LM's change against the baseline with a paired
bootstrap interval, per set and over the --pool sets together (all from slm_lm.rescoring.wer). Above the tables,
ESPnet's environment block: date, OS, versions, the checkout's git commit, and the --files (models, configs).

    make_results.py --decode-dir exp/asr_x/decode_asr --data data --sets "dev_clean test_clean" \
        --rescored slm=exp/rescore_slm clm=exp/rescore_clm --pool "test_clean" \
        --files "ASR config=exp/asr_x/config.yaml" "ASR model=exp/asr_x/valid.acc.ave.pth" --out RESULTS.md
"""
import argparse
import json
import platform
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import write_atomic
from slm_lm.common.outputs import check_no_overlap, check_output_file
from slm_lm.rescoring.nbest import read_espnet_nbest
from slm_lm.rescoring.scored_set import am_score, parse_am_weights
from slm_lm.rescoring.transcripts import read_text
from slm_lm.rescoring.wer import align_transcripts, char_tokens, paired_bootstrap, wer_columns, wer_table, word_errors


def utterance_errors(alignments):
    """(word errors, reference words) per utterance, from the alignments of `align_transcripts`."""
    return [a.errors for a in alignments], [a.ref_words for a in alignments]


BOOTSTRAP_SAMPLES = 10_000


def gain_rows(name, rows):
    """Markdown rows: `name` against the baseline per (label, base_errors, errors, words) of `rows`."""
    out = []
    for label, base, errors, words in rows:
        r = paired_bootstrap(base, errors, words, samples=BOOTSTRAP_SAMPLES)
        out.append(f"|{label}|{name}|{r.wer_a:.2f}|{r.wer_b:.2f}|{r.delta:+.2f} ({100 * r.delta / r.wer_a:+.1f} %)|"
                   f"{r.ci_low:+.2f} .. {r.ci_high:+.2f}|{r.p_b_better:.3f}|")
    return out


def cer_columns(refs, hyps, where):
    """ESPnet's CER columns of `hyps` against `refs` (characters, `<space>` for a space)."""
    return wer_columns(align_transcripts(char_tokens(refs), char_tokens(hyps), where))


def oracle_hyps(nbest_lists, refs):
    """Per utterance the hypothesis with the fewest word errors (ties go to the better rank)."""
    out = {}
    for uttid, hyps in nbest_lists.items():
        errors = word_errors([refs[uttid]] * len(hyps), [h.text for h in hyps])
        out[uttid] = hyps[int(errors.argmin())].text
    return out


def am_only_hyps(nbest_lists, weights):
    """1-best under the AM score `sum_k w_k * scores[k]` (the rescoring baseline, lambda = 0)."""
    return {uttid: max(hyps, key=lambda h: am_score(h, weights)).text for uttid, hyps in nbest_lists.items()}


def labelled_paths(option, specs, label="NAME"):
    """{label: Path} of the `option` LABEL=PATH values: each label once, each path existing."""
    paths = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise InputError(f"{option} {spec!r}: want {label}=PATH")
        if name in paths:
            raise InputError(f"{option} {spec!r}: the name {name!r} is given twice")
        if not Path(path).exists():
            raise InputError(f"{path}: no such file or directory ({option} {name})")
        paths[name] = Path(path)
    return paths


def read_tuning(rdir):
    """The chosen weights of a slm-rescore output directory (its tuning.json's "best")."""
    path = rdir / "tuning.json"
    if not path.is_file():
        raise InputError(f"{path}: missing; --rescored wants a slm-rescore output directory")
    try:
        return json.loads(path.read_text(encoding="utf-8"))["best"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: not a tuning.json of slm-rescore ({type(e).__name__}: {e})") from None


def git_commit(where):
    """(hash, commit date, uncommitted changes?) of the git checkout holding `where`; None outside one."""
    def git(*args):
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=True).stdout
    try:
        return git("rev-parse", "HEAD").strip(), git("log", "-1", "--format=%cd").strip(), bool(git("status", "--porcelain"))
    except (OSError, subprocess.CalledProcessError):
        return None


def environment(files):
    """ESPnet's "## Environments" lines (its show_asr_result.sh's), with the OS, slm_lm's version and the
    `files` ({label: path}) that made the results."""
    import torch

    import slm_lm
    try:
        import espnet
        espnet_version = espnet.__version__
    except ImportError:
        espnet_version = "not installed"
    lines = ["## Environments", f"- date: `{datetime.now().astimezone().strftime('%a %b %d %H:%M:%S %Z %Y')}`",
             f"- os: `{platform.platform()}`", f"- machine: `{platform.machine()}`",
             f"- python version: `{sys.version.split()[0]}`",
             f"- espnet version: `espnet {espnet_version}`", f"- pytorch version: `pytorch {torch.__version__}`",
             f"- slm_lm version: `slm_lm {slm_lm.__version__}`"]
    commit = git_commit(Path(slm_lm.__file__).parent)
    if commit:
        lines += [f"- Git hash: `{commit[0]}`" + (" (with uncommitted changes)" if commit[2] else ""),
                  f"  - Commit date: `{commit[1]}`"]
    else:
        lines.append("- Git hash: none (slm_lm is not in a git checkout)")
    lines += [f"- {label}: `{path}`" for label, path in files.items()]
    return lines


def main(argv=None):
    """Command line: build RESULTS.md."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--decode-dir", required=True, help="directory with one N-best dir per set")
    p.add_argument("--data", required=True, help="data root (references: <data>/<set>/text)")
    p.add_argument("--sets", required=True, help="space-separated set names")
    p.add_argument("--rescored", nargs="*", default=[], help="NAME=DIR of slm_lm.bin.rescore outputs")
    p.add_argument("--am-weights", default="decoder=0.7,ctc=0.3")
    p.add_argument("--nbest", type=int, default=10)
    p.add_argument("--pool", default="", help="space-separated sets also compared together (e.g. the test sets)")
    p.add_argument("--title", default="")
    p.add_argument("--files", nargs="*", default=[], help="LABEL=PATH of the models and configs, listed above the tables")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    weights = parse_am_weights(args.am_weights)
    decode_dir, sets = Path(args.decode_dir), args.sets.split()
    rdirs = labelled_paths("--rescored", args.rescored)
    files = labelled_paths("--files", args.files, "LABEL")
    systems = {"baseline (AM only)": {}, **{f"rescored, {name}": {} for name in rdirs},
               f"oracle ({args.nbest}-best)": {}}
    pool = args.pool.split()
    if set(pool) - set(sets):
        raise InputError(f"--pool {args.pool!r}: not among --sets {args.sets!r}")
    data = Path(args.data)
    inputs = [data / s / "text" for s in sets] + [decode_dir / s for s in sets] + list(rdirs.values())
    out = check_output_file("--out", args.out)  # a link is written through
    check_no_overlap("--out", args.out, inputs)
    lambdas = {name: read_tuning(rdir) for name, rdir in rdirs.items()}
    errors = {}  # errors[(system, set)] = (word errors, reference words) per utterance
    cer = {name: {} for name in systems}  # CER columns per system and set
    for s in sets:
        refs = read_text(data / s / "text")
        d = decode_dir / s
        nbest_lists = read_espnet_nbest(d, args.nbest)
        base = align_transcripts(refs, am_only_hyps(nbest_lists, weights), d)
        systems["baseline (AM only)"][s] = wer_columns(base)
        cer["baseline (AM only)"][s] = cer_columns(refs, am_only_hyps(nbest_lists, weights), d)
        errors["baseline", s] = utterance_errors(base)
        for name, rdir in rdirs.items():
            rescored = align_transcripts(refs, read_text(rdir / s / "1best_recog" / "text"), rdir / s)
            systems[f"rescored, {name}"][s] = wer_columns(rescored)
            cer[f"rescored, {name}"][s] = cer_columns(refs, read_text(Path(rdir) / s / "1best_recog" / "text"), rdir)
            errors[name, s] = utterance_errors(rescored)
        oracle = align_transcripts(refs, oracle_hyps(nbest_lists, refs), d)
        systems[f"oracle ({args.nbest}-best)"][s] = wer_columns(oracle)
        cer[f"oracle ({args.nbest}-best)"][s] = cer_columns(refs, oracle_hyps(nbest_lists, refs), d)

    lines = ["<!-- Generated by local/make_results.py -->", "# RESULTS", f"{args.title}", "",
             *environment(files),
             f"- AM score: `{args.am_weights}`; LM weights tuned on the dev sets: "
             + ", ".join(f"{n}: `{json.dumps(b)}`" for n, b in lambdas.items()), "",
             "## Summary (WER %)", "",
             "|dataset|" + "|".join(systems) + "|", "|---|" + "---|" * len(systems)]
    for s in sets:
        lines.append(f"|{s}|" + "|".join(f"{systems[n][s]['Err']:.2f}" for n in systems) + "|")
    lines += ["", "## Summary (CER %)", "", "|dataset|" + "|".join(cer) + "|", "|---|" + "---|" * len(cer)]
    lines += [f"|{s}|" + "|".join(f"{cer[n][s]['Err']:.2f}" for n in cer) + "|" for s in sets]
    if args.rescored:
        lines += ["", "## Rescoring against the baseline (paired bootstrap over utterances, "
                  f"{BOOTSTRAP_SAMPLES:,} resamples)", "",
                  "|dataset|LM|baseline|rescored|change (relative)|95 % interval|P(rescored better)|",
                  "|---|---|---|---|---|---|---|"]
        def pooled(who, i):  # errors[who, s][i] of the pool's sets, one list
            return [x for s in pool for x in errors[who, s][i]]

        for name in rdirs:
            rows = [(s, errors["baseline", s][0], errors[name, s][0], errors[name, s][1]) for s in sets]
            if pool:
                rows.append((" + ".join(pool), pooled("baseline", 0), pooled(name, 0), pooled(name, 1)))
            lines += gain_rows(name, rows)
    lines += ["", f"## {decode_dir}", ""]
    for name, per_set in systems.items():
        lines += wer_table(f"WER, {name}", [(s, per_set[s]) for s in sets])
    try:
        write_atomic(out, "\n".join(lines))
    except OSError as e:
        raise InputError(f"--out {args.out}: cannot write it: {e.strerror or e}") from None
    print(f"wrote {args.out}")


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        fail("make_results.py", e)
