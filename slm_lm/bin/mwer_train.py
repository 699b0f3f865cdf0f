"""slm-mwer-train: fine-tune an LM discriminatively (minimum word error rate) on N-best lists, then rescore test
lists with every weight tuned on held-out training utterances.

Example (train on dev_clean's 10-best lists, test on dev_other's; the first-pass LM removed from the AM)::

    N=$(slm-data path librispeech-nbest)
    slm-mwer-train --model slm-books --train $N/dev_clean --test $N/dev_other --nbest 10 \\
        --am-weights decoder=0.6,ctc=0.4 --lr 3e-5 --lm-weight 0.5 --out exp/mwer/slm_clean

OUT/model/ is an ordinary model directory (slm-rescore, slm-score take it); OUT/curve.tsv the held-out WER
along training; OUT/rescore/ the test lists rescored as slm-rescore writes them. A killed run resumes.
"""
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.options import Parser, number
from slm_lm.common.outputs import check_no_overlap
from slm_lm.model.precision import DTYPE_CHOICES, device_option, resolve_dtype
from slm_lm.model.tokenizer import UNKNOWN_CHOICES
from slm_lm.pretrain.mwer_trainer import TRAINABLE
from slm_lm.rescoring.inputs import comma_list, load_nbest_sets, normalized_sets
from slm_lm.rescoring.scored_set import parse_am_weights, score_column
from slm_lm.rescoring.weight_search import parse_range

COMMAND = "slm-mwer-train"


def build_parser() -> Parser:
    """Command-line options."""
    p = Parser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the LM to start from: a shipped name (slm-books, clm-books) or a "
                   "model directory; one-pass kinds only (slm, clm, bilm, tta)")
    p.add_argument("--train", required=True, help="training N-best input(s), comma-separated: ESPnet dir, .json or "
                   ".tsv")
    p.add_argument("--train-ref", default="", help="reference file(s) for --train, comma-separated ('-': found with "
                   "the data)")
    p.add_argument("--test", default="", help="test N-best input(s), rescored after training (never trained or "
                   "tuned on)")
    p.add_argument("--test-ref", default="", help="reference file(s) for --test, like --train-ref")
    p.add_argument("--nbest", type=number(int, 1), default=None, help="use ranks 1..N (default: all)")
    p.add_argument("--am-weights", default=None, help="AM = weighted per-scorer scores, e.g. decoder=0.6,ctc=0.4 "
                   "(default: the file's total score)")
    p.add_argument("--fixed", action="append", default=[], help="a score column and its weight in the totals, "
                   "e.g. score:lm=0.9 (repeatable); not trained, tuned again with the model for --test")
    p.add_argument("--lambda", dest="lam", type=number(float, above=0), default=None,
                   help="the LM's weight in the loss (default: tuned on the held-out lists with the starting model)")
    p.add_argument("--scale", type=number(float, above=0), default=1.0,
                   help="score scale of the softmax over each N-best (default 1: log-probabilities in nats)")
    p.add_argument("--lm-weight", type=number(float, 0), default=0.5,
                   help="weight of the LM's own loss per token on the references (default 0.5; 0: MWER only)")
    p.add_argument("--trainable", default="all", choices=TRAINABLE,
                   help="what is trained: " + "; ".join(f"{k}: {v[0]}" for k, v in TRAINABLE.items()) + " (default all)")
    p.add_argument("--lr", type=number(float, above=0), default=3e-5, help="peak learning rate (default 3e-5)")
    p.add_argument("--warmup", type=number(float, 0, 1), default=0.1, help="share of the updates for the linear "
                   "warm-up, then linear decay to 0 (default 0.1)")
    p.add_argument("--epochs", type=number(float, 0), default=1.0, help="passes over the training utterances "
                   "(default 1; 0: no update, the starting model evaluated as the trained ones are)")
    p.add_argument("--updates", type=number(int, 1), default=0, help="number of updates instead of --epochs")
    p.add_argument("--batch-tokens", type=number(int, 1), default=4096,
                   help="padded tokens of the hypotheses per update, whole utterances (default 4096)")
    p.add_argument("--held-out", type=number(float, 0, 0.9), default=0.1,
                   help="share of the training utterances held out, by speaker, for the curve, early stopping and "
                   "the weights (default 0.1)")
    p.add_argument("--valid-every", type=number(int, 1), default=50, help="updates between validations (default 50)")
    p.add_argument("--patience", type=number(int, 0), default=3,
                   help="validations without a lower held-out WER before stopping (default 3; 0: never)")
    p.add_argument("--lambda-range", default="0:5:0.1", help="LM weight grid of the held-out tuning (default 0:5:0.1)")
    p.add_argument("--beta-range", default="0", help="word bonus grid of the held-out tuning and the test rescoring, "
                   "e.g. --beta-range=-1:3:0.25 (default 0: none); never part of the loss")
    p.add_argument("--seed", type=number(int, 0), default=0, help="seed of the held-out draw and the batches")
    p.add_argument("--device", default="cpu", type=device_option(COMMAND), help="device (default cpu)")
    p.add_argument("--dtype", default="float32", choices=DTYPE_CHOICES,
                   help="autocast dtype (auto: bf16 where native; default float32)")
    p.add_argument("--threads", type=number(int, 0), default=0, help="CPU threads (0: torch's default)")
    p.add_argument("--unknown", default="error", choices=UNKNOWN_CHOICES,
                   help="characters the tokenizer does not know: fail (default) or map to <unk>")
    p.add_argument("--truncate", action="store_true", help="keep only the first tokens of over-long hypotheses")
    p.add_argument("--no-normalize", action="store_true", help="texts as they are (default: LibriSpeech-normalised)")
    p.add_argument("--out", required=True, help="output dir: model/, curve.tsv, checkpoint.pt, rescore/")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return p


def fixed_columns(values: list) -> dict:
    """{column: weight} of the ``--fixed score:NAME=WEIGHT`` values."""
    out = {}
    for value in values:
        spec, sep, weight = value.rpartition("=")
        column = score_column(spec) if sep else None
        if column is None:
            raise InputError(f"--fixed {value!r}: want score:NAME=WEIGHT, e.g. score:lm=0.9")
        try:
            out[column.column] = float(weight)
        except ValueError:
            raise InputError(f"--fixed {value!r}: the weight {weight!r} is not a number") from None
    return out


def main(argv=None) -> None:
    """Entry point of ``slm-mwer-train``."""
    args = build_parser().parse_args(argv)
    try:
        import torch

        from slm_lm.pretrain.mwer_trainer import ONE_PASS_KINDS, MwerSettings, mwer_train
        from slm_lm.scoring.scorer import Scorer

        if args.threads:
            torch.set_num_threads(args.threads)
        dtype = resolve_dtype(args.dtype, args.device)
        settings = MwerSettings(
            model=args.model, out_dir=Path(args.out),
            am_weights=parse_am_weights(args.am_weights) if args.am_weights else None,
            fixed=fixed_columns(args.fixed), lam=args.lam, scale=args.scale, lm_weight=args.lm_weight, lr=args.lr,
            warmup=args.warmup, epochs=args.epochs, updates=args.updates, batch_tokens=args.batch_tokens,
            held_out=args.held_out, valid_every=args.valid_every, patience=args.patience,
            lambda_grid=parse_range(args.lambda_range, "--lambda-range"),
            beta_grid=parse_range(args.beta_range, "--beta-range"), seed=args.seed, device=args.device,
            dtype=dtype, trainable=args.trainable)
        train = load_nbest_sets(comma_list(args.train), comma_list(args.train_ref), "--train", args.nbest)
        test = load_nbest_sets(comma_list(args.test), comma_list(args.test_ref), "--test", args.nbest)
        if not args.no_normalize:
            train, test = normalized_sets(train), normalized_sets(test)
        refs = [r for r in comma_list(args.train_ref) + comma_list(args.test_ref) if r != "-"]
        inputs = refs + ([args.model] if Path(args.model).exists() else [])
        check_no_overlap("--out", args.out, [s.source for s in train + test] + inputs)
        options = {"unknown": args.unknown, "truncate": args.truncate}
        if args.no_normalize:
            options["normalize"] = False
        scorer = Scorer.from_pretrained(args.model, device=args.device, dtype=dtype, **options)
        if scorer.kind not in ONE_PASS_KINDS:
            raise InputError(f"--model {args.model}: a {scorer.kind!r} model; MWER training needs a sentence's score "
                             f"in one pass ({', '.join(ONE_PASS_KINDS)})")
        card, rescored = mwer_train(settings, scorer, train, test, inputs, not args.no_progress, options)
    except (InputError, OSError) as err:
        fail(COMMAND, err)
    best = card["best"]
    print(f"stopped: {card['stopped']} after {card['updates']} updates; best held-out WER {best['heldout_wer']:.3f} "
          f"(lambda {best['heldout_lambda']:g}, word bonus {best.get('heldout_beta', 0):g}) at update "
          f"{best['updates']}; loss lambda {card['loss']['lambda']:g}")
    print(f"wrote {args.out}/model, {args.out}/curve.tsv")
    if rescored is not None:
        result, reports = rescored
        print(f"weights tuned on the held-out lists: lambda = {', '.join(f'{x:g}' for x in result.best.lambdas)}, "
              f"word bonus = {result.best.beta:g}")
        for r in reports:
            print(f"{r.name} ({r.role}): AM-only {r.wer_am:.2f}  file 1-best {r.wer_file:.2f}  "
                  f"rescored {r.wer_rescored:.2f}  oracle {r.wer_oracle:.2f}")
        print(f"wrote {args.out}/rescore/RESULTS.md")


if __name__ == "__main__":
    main()
