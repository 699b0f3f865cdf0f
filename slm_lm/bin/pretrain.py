"""slm-pretrain: encode a corpus, or pre-train an LM kind for a budget of minutes or updates (see slm_lm.pretrain).

`encode` writes NAME.ids.xz and, beside it, NAME.ids.json naming the tokenizer that encoded it; `train` refuses a
corpus encoded with another tokenizer than the one in --data (a corpus without NAME.ids.json is accepted without
that check) or holding token ids beyond its vocabulary. One `train` at a time writes into an --out (a second is
refused); a run resumes the checkpoint in --out, exactly (random-number states included), and refuses one of
another kind, model shape, dropout, seed or tokenizer. With --keep-models every validation's model is also kept in
OUT/snapshots/UPDATES/.
"""
import json
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.options import Parser, number
from slm_lm.common.outputs import check_no_overlap, check_output_dir, check_output_file
from slm_lm.model.config import KINDS, SIZES
from slm_lm.model.precision import DTYPE_CHOICES, device_option


def main(argv=None):
    parser = Parser(prog="slm-pretrain", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    enc = sub.add_parser("encode", help="text (one normalised sentence a line) -> NAME.ids.xz, and NAME.ids.json "
                                        "naming its tokenizer")
    enc.add_argument("--bpe-dir", required=True, help="directory with bpe.model and tokens.txt")
    enc.add_argument("--text", required=True)
    enc.add_argument("--out", required=True)
    enc.add_argument("--max-sentences", type=number(int, 0), default=0, help="encode only the first N lines (0: all)")
    tr = sub.add_parser("train", help="train one kind on DATA/{train,valid}.ids.xz + tokenizer files")
    tr.add_argument("--kind", required=True, choices=KINDS)
    tr.add_argument("--data", required=True,
                    help="directory: train.ids.xz, valid.ids.xz, bpe.model, tokens.txt; a corpus whose NAME.ids.json "
                         "names another tokenizer is refused (one without it is not checked)")
    tr.add_argument("--out", required=True,
                    help="directory of the run (one run at a time); a checkpoint there is resumed if it is of the "
                         "same kind, model options, seed and tokenizer, and refused otherwise")
    budget = tr.add_mutually_exclusive_group(required=True)
    budget.add_argument("--minutes", type=number(float, above=0), help="training budget in minutes of --clock time")
    budget.add_argument("--updates", type=number(int, 1),
                        help="training budget in updates: the same schedule and result on any machine")
    tr.add_argument("--clock", default="wall", choices=("wall", "cpu"),
                    help="budget clock: wall time, or this process's CPU time (equal compute on shared CPUs)")
    tr.add_argument("--deadline", type=number(float, 0), default=0.0,
                    help="wall-clock minutes after which the run ends whatever the budget (0: none)")
    tr.add_argument("--size", default="mini", choices=tuple(SIZES))
    for name in ("n_layers", "d_model", "n_heads", "d_ff", "max_positions"):
        tr.add_argument("--" + name.replace("_", "-"), type=number(int, 1))
    tr.add_argument("--dropout", type=number(float, 0, 1), default=0.1)
    tr.add_argument("--lr", type=number(float, above=0), default=1e-3, help="peak learning rate")
    tr.add_argument("--warmup", type=number(float, 0, 1), default=0.05, help="fraction of the budget for linear warm-up")
    tr.add_argument("--batch-tokens", type=number(int, 1), default=4096,
                    help="tokens per update, padding included: rows of --row-tokens, each packed with whole sentences")
    tr.add_argument("--row-tokens", type=number(int, 3), default=0,
                    help="tokens per row (default: --max-positions); a longer sentence is cut to it")
    tr.add_argument("--compile", default="auto", choices=("auto", "on", "off"),
                    help="compile the step's forward and backward (torch.compile) before the budget starts; "
                         "auto: on CUDA")
    tr.add_argument("--device", default="cpu", type=device_option("slm-pretrain"))
    tr.add_argument("--dtype", default="float32", choices=DTYPE_CHOICES,
                    help="autocast dtype (auto: bf16 where the device computes it natively, else float32)")
    tr.add_argument("--valid-every", type=number(float, 0), default=10.0, help="minutes of --clock time between validations")
    tr.add_argument("--valid-sentences", type=number(int, 0), default=0, help="validate on the first N sentences (0: all)")
    tr.add_argument("--seed", type=number(int, 0), default=0)
    tr.add_argument("--threads", type=number(int, 1), help="CPU threads (default: torch's)")
    tr.add_argument("--content-loss", type=number(float, 0), default=0.0,
                    help="SLM only: weight of the content streams' neighbour-prediction loss (0: the paper's loss)")
    tr.add_argument("--content-sample", type=number(float, 1e-9, 1), default=1.0,
                    help="share of positions that get the content-stream loss (its softmax is the cost)")
    tr.add_argument("--whole-words", action="store_true",
                    help="train the whole-word objective: each piece predicted without the later pieces of its own "
                         "word (the model is then scored that way by default; no change for a CLM)")
    tr.add_argument("--init", default="",
                    help="start from the weights of a saved model (shipped name or model directory) with the "
                         "same tokenizer and shape; the kind may differ (e.g. a CLM's or MLM's weights for an SLM)")
    tr.add_argument("--keep-models", action="store_true",
                    help="also keep each validation's model, scoring-ready, in OUT/snapshots/UPDATES/ (one that "
                         "exists is not rewritten); it changes no training: a run may be resumed with or without it")
    args = parser.parse_args(argv)
    try:
        if args.command == "encode":
            from slm_lm.model.tokenizer import Tokenizer
            from slm_lm.pretrain import encode_corpus

            if not args.out.endswith(".ids.xz"):
                raise InputError(f"--out {args.out}: name it NAME.ids.xz (train reads DATA/train.ids.xz and "
                                 "DATA/valid.ids.xz)")
            check_no_overlap("--out", args.out, [args.text])
            out = check_output_file("--out", args.out)
            print(json.dumps(encode_corpus(args.text, Tokenizer.from_dir(args.bpe_dir), out,
                                           args.max_sentences)))
            return
        from slm_lm.pretrain import PretrainSettings, pretrain

        check_train_options(args)
        model_args = dict(SIZES[args.size], dropout=args.dropout)
        model_args.update({k: getattr(args, k) for k in ("n_layers", "d_model", "n_heads", "d_ff", "max_positions")
                           if getattr(args, k) is not None})
        settings = PretrainSettings(
            kind=args.kind, data_dir=Path(args.data), out_dir=Path(args.out), model_args=model_args,
            minutes=args.minutes or 0.0, updates=args.updates or 0, clock=args.clock, deadline_minutes=args.deadline,
            peak_lr=args.lr, warmup=args.warmup, batch_tokens=args.batch_tokens, row_tokens=args.row_tokens,
            compile=args.compile, device=args.device,
            dtype=args.dtype, threads=args.threads or 0, seed=args.seed, valid_every_minutes=args.valid_every,
            valid_sentences=args.valid_sentences, content_loss=args.content_loss,
            content_sample=args.content_sample, whole_words=args.whole_words, init=args.init,
            keep_models=args.keep_models)
        card = pretrain(settings)
        print(json.dumps(card))
    except (InputError, ValueError, OSError) as e:
        fail("slm-pretrain", e)


def check_train_options(args) -> None:
    """Refuse an --out that is a file or overlaps --data (the numbers are checked by their option types)."""
    check_output_dir("--out", args.out, (), (), "slm-pretrain")
    check_no_overlap("--out", args.out, [args.data] + ([args.init] if args.init and Path(args.init).exists() else []))


if __name__ == "__main__":
    main()
