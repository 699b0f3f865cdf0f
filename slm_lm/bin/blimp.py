"""slm-blimp: BLiMP minimal-pair accuracy of a model, per paradigm and in the paper's 12 columns.

Writes OUT/blimp_results.md (the table, with the paper's published rows), OUT/blimp_results.json,
OUT/blimp_paradigms.json (per paradigm, ties listed) and OUT/score_cache/ (sentence scores; an
interrupted run resumes from it). Ties count as errors.
"""
import argparse
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.options import Parser, number
from slm_lm.common.outputs import check_no_overlap, check_output_dir
from slm_lm.data import datasets
from slm_lm.model.precision import DTYPE_CHOICES, device_option


def parse_args(argv=None):
    p = Parser(prog="slm-blimp", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model spec: a model dir, hf-causal:DIR or hf-masked:DIR")
    p.add_argument("--data", help="BLiMP jsonl directory (default: blimp/ in the data directory, $SLM_LM_DATA "
                   "or ~/.cache/slm_lm, filled by `slm-data get blimp`)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--label", default=None, help="row label in the table (default: the model spec)")
    p.add_argument("--paradigms", default="", help="comma-separated paradigm names (default: all files)")
    p.add_argument("--limit", type=number(int, 1), default=None, help="first N pairs per paradigm (quick runs)")
    p.add_argument("--device", default=None, type=device_option("slm-blimp"))
    p.add_argument("--dtype", default=None, choices=DTYPE_CHOICES, help="compute dtype (auto: bf16 where native)")
    p.add_argument("--max-tokens", type=number(int, 1), default=None, help="padded tokens per batch")
    p.add_argument("--case", default=None, choices=["as-is", "lower", "sentence"],
                   help="Hugging Face models only: text casing (default as-is)")
    p.add_argument("--whole-words", action="store_true",
                   help="whole-word scoring: each piece without the later pieces of its own word (PLL-word-l2r)")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from slm_lm.evaluation.blimp import load_blimp, score_blimp, write_results
    from slm_lm.scoring.scorer import load_scorer

    options = {k: v for k, v in dict(device=args.device, dtype=args.dtype, max_tokens=args.max_tokens,
                                     case=args.case).items() if v is not None}
    if args.whole_words:
        options["whole_words"] = True
    if "case" in options and not args.model.startswith("hf-"):
        fail("slm-blimp", "--case applies to hf-causal:/hf-masked: models only")
    try:
        model = args.model.split(":", 1)[-1] if args.model.startswith("hf-") else args.model
        blimp_dir = args.data or datasets.require("blimp")
        check_no_overlap("--out", args.out, [blimp_dir] + ([model] if Path(model).exists() else []))
        check_output_dir("--out", args.out, (), (), "slm-blimp")
        data = load_blimp(blimp_dir, [p for p in args.paradigms.split(",") if p], args.limit)
        scorer = load_scorer(args.model, **options)
        results = score_blimp(scorer, data, cache_dir=Path(args.out) / "score_cache", progress=not args.no_progress)
        write_results(results, args.out, args.label or args.model)
    except (InputError, OSError) as e:
        fail("slm-blimp", e)
    ties = results["ties"]
    print(f"BLiMP overall accuracy {results['overall']:.2f}% over {results['pairs']} pairs in "
          f"{results['paradigms']} paradigms; {ties['count']} ties counted as errors "
          f"({ties['identical_sentences']} identical-sentence pairs)")
    print("  " + "  ".join(f"{k} {v:.1f}" for k, v in results["phenomena"].items() if v is not None))
    print(f"wrote {args.out}/blimp_results.md")


if __name__ == "__main__":
    main()
