"""slm-train-bpe: a sentencepiece tokenizer (unigram or BPE) on prepared text -> DIR/bpe.model + DIR/tokens.txt."""

import time

from slm_lm.common.errors import InputError, fail
from slm_lm.common.options import Parser, number
from slm_lm.model.bpe import train_bpe


def main(argv=None):
    parser = Parser(prog="slm-train-bpe", description=__doc__)
    parser.add_argument("--text", required=True, help="training text, one normalised sentence per line")
    parser.add_argument("--vocab-size", type=number(int, 1), default=5000, help="sentencepiece vocabulary size")
    parser.add_argument("--input-sentence-size", type=number(int, 1), default=1_000_000,
                        help="at most this many sentences (a seeded sample) are used for training")
    parser.add_argument("--model-type", choices=("unigram", "bpe"), default="bpe",
                        help="sentencepiece model type (ESPnet's asr.sh --bpemode, whose default is unigram; "
                             "bpe here, the shipped models' tokenizers)")
    parser.add_argument("--seed", type=number(int, 0), default=0)
    parser.add_argument("--num-threads", type=number(int, 1), default=1)
    parser.add_argument("--out", required=True, help="output directory")
    args = parser.parse_args(argv)
    started = time.time()
    try:
        tokenizer = train_bpe(args.text, args.out, args.vocab_size, args.input_sentence_size, args.seed,
                              args.num_threads, model_type=args.model_type)
    except (InputError, OSError) as e:
        fail("slm-train-bpe", e)
    print(f"wrote {args.out}/bpe.model and {args.out}/tokens.txt: {tokenizer.vocab_size} tokens "
          f"(<mask> {tokenizer.mask_id}, <sos/eos> {tokenizer.eos_id}) in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
