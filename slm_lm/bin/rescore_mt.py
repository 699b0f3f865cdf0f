"""slm-rescore-mt: rerank machine-translation N-best lists with LMs, weights tuned for corpus BLEU on dev.

Example (fairseq-generate --nbest 10 outputs of a dev and a test set, references as plain text)::

    slm-rescore-mt --dev gen_valid.txt --dev-ref valid.en --test gen_test.txt --test-ref test.en \\
        --lm slm-books --out exp/mt_rerank

total = MT score + lambda * LM score + beta * words, lambda and beta chosen for sacrebleu's corpus BLEU
on dev and applied to test. Needs sacrebleu (pip install 'slm_lm[mt]').
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slm_lm.rescoring import bleu
from slm_lm.common.errors import InputError, fail
from slm_lm.rescoring.mt_nbest import BPE_SYMBOLS, FORMATS, HYP_LINES, load_mt_nbest
from slm_lm.rescoring.mt_rescore import rerank_mt
from slm_lm.rescoring.inputs import (
    add_lm_option,
    add_scorer_options,
    add_weight_options,
    comma_list,
    lm_specs,
    load_lms,
    scorer_options,
    tuning_options,
)
from slm_lm.rescoring.scored_set import score_column
from slm_lm.common.options import Parser, number

PROG = "slm-rescore-mt"


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--dev", required=True, help="dev N-best file(s), comma-separated: fairseq-generate output "
                   "or Moses/Marian n-best ('id ||| text ||| features ||| total')")
    p.add_argument("--dev-ref", required=True, help="reference file(s) for --dev, plain text, line k = sentence k "
                   "(counted from 0), comma-separated in --dev order")
    p.add_argument("--test", default="", help="test N-best file(s), comma-separated")
    p.add_argument("--test-ref", default="", help="reference file(s) for --test, like --dev-ref")
    p.add_argument("--format", default="auto", choices=FORMATS,
                   help="N-best format (default auto: moses when a line holds '|||', else fairseq)")
    p.add_argument("--hyp-lines", default="auto", choices=HYP_LINES,
                   help="fairseq: hypothesis text of the D- (detokenised) or H- lines (default auto: D when present)")
    p.add_argument("--remove-bpe", default="subword_nmt", choices=list(BPE_SYMBOLS),
                   help="BPE removal from the hypotheses as fairseq's --remove-bpe: subword_nmt ('@@ ', the "
                   "default; no change to text without it), sentencepiece ('\u2581'), none")
    add_lm_option(p)
    p.add_argument("--nbest", type=number(int, 1), default=None, help="use the first N hypotheses per sentence (default: all)")
    p.add_argument("--am-weights", default=None,
                   help="MT score = weighted per-scorer scores, e.g. positional=1 (fairseq: the sum of the P- "
                   "scores, unnormalised) or Moses feature names; default: the file's score (fairseq: H- score)")
    add_weight_options(p, "0:2:0.05", "-1:1:0.1")
    p.add_argument("--bleu-tokenize", default="13a", help="sacrebleu tokenizer (default 13a; none, intl, zh, ...)")
    p.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU (sacrebleu -lc)")
    p.add_argument("--bootstrap-samples", type=number(int, 1, 1_000_000), default=1000,
                   help="resamples of sacrebleu's paired bootstrap (default 1000)")
    add_scorer_options(p, PROG)
    p.add_argument("--no-normalize", action="store_true",
                   help="the LMs score the hypotheses as they are (default: as each model was trained, e.g. "
                   "LibriSpeech-style upper case for the shipped models); BLEU always sees them as they are")
    p.add_argument("--out", required=True, help="output dir: RESULTS.md, tuning.json, <set>/{rescored,baseline}.txt")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return p


def load_sets(args: argparse.Namespace, option: str, paths: str, refs: str) -> list:
    """The MT N-best sets of ``option`` with one reference file each."""
    paths, refs = comma_list(paths), comma_list(refs)
    if len(refs) != len(paths):
        raise InputError(f"{option}-ref: {len(refs)} reference files for {len(paths)} {option} inputs")
    return [load_mt_nbest(p, r, args.format, args.hyp_lines, args.remove_bpe, args.nbest) for p, r in zip(paths, refs)]


def main(argv=None) -> None:
    """Entry point of ``slm-rescore-mt``."""
    args = build_parser().parse_args(argv)
    try:
        if args.bootstrap_samples < 1:
            raise InputError(f"--bootstrap-samples: must be >= 1, got {args.bootstrap_samples}")
        metric = bleu.bleu_metric(args.bleu_tokenize, args.lowercase)
        specs = lm_specs(args.lm)
        tuning = tuning_options(args, len(specs))
        dev = load_sets(args, "--dev", args.dev, args.dev_ref)
        test = load_sets(args, "--test", args.test, args.test_ref)
        inputs = comma_list(args.dev_ref) + comma_list(args.test_ref)
        inputs += [spec for spec in specs if score_column(spec) is None and Path(spec).exists()]
        scorers = load_lms(specs, **scorer_options(args))
        settings = {"command": f"{PROG} " + " ".join(sys.argv[1:] if argv is None else argv)}
        result, reports, signature = rerank_mt(
            dev, test, scorers, args.out, metric, cache_dir=args.cache or f"{args.out}/lm_cache", settings=settings,
            progress=not args.no_progress, inputs=inputs, bootstrap_samples=args.bootstrap_samples, **tuning)
    except (InputError, OSError) as err:
        fail(PROG, err)
    w = result.best
    alphas = f", alpha = {', '.join(f'{x:g}' for x in w.alphas)}" if w.alphas else ""
    print(f"chosen lambda = {', '.join(f'{x:g}' for x in w.lambdas)}, beta = {w.beta:g}{alphas}")
    print(f"sacrebleu: {signature}")
    for r in reports:
        print(f"{r.name} ({r.role}): BLEU baseline {r.baseline:.2f}  rescored {r.rescored:.2f} "
              f"(bootstrap {r.bootstrap_mean:.2f} ± {r.bootstrap_ci:.2f}, p = {r.p_value:.4f})  oracle {r.oracle:.2f}")
    print(f"wrote {args.out}/RESULTS.md")


if __name__ == "__main__":
    main()
