#!/usr/bin/env python3
"""Where a pre-training step's CPU time goes: torch.profiler over real batches of packed rows, as slm-pretrain's.

Trains `--kind` (slm-pretrain's model shape options) on the first `--batches` batches of an encoded corpus
(`slm-pretrain encode` output) once untimed, so kernels and caches are warm, then once under the profiler,
and prints the CPU seconds of that pass and the top operators by self CPU time.

Example: python local/benchmarks/profile_train_step.py --corpus exp/pretrain/data/valid.ids.xz --kind slm \
    --dtype bfloat16
"""
import argparse
import random
import time

import torch
from torch.profiler import ProfilerActivity, profile

from slm_lm import build_lm
from slm_lm.model.config import KINDS
from slm_lm.model.precision import DTYPES, autocast
from slm_lm.pretrain import PackedRows, Sentences, load_corpus, pack_rows


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, help="an .ids.xz corpus (slm-pretrain encode)")
    p.add_argument("--kind", default="slm", choices=KINDS)
    p.add_argument("--dtype", default="float32", choices=DTYPES)
    p.add_argument("--vocab", type=int, default=5003, help="vocabulary size (BPE 5000 + specials)")
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=192)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=768)
    p.add_argument("--batch-tokens", type=int, default=512, help="tokens per batch, as slm-pretrain's")
    p.add_argument("--row-tokens", type=int, default=256, help="tokens per row, as slm-pretrain's")
    p.add_argument("--batches", type=int, default=40, help="batches per pass")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--top", type=int, default=12, help="operators to print")
    args = p.parse_args(argv)
    if not 3 <= args.row_tokens <= args.batch_tokens:
        p.error(f"--row-tokens {args.row_tokens}: need 3 <= --row-tokens <= --batch-tokens ({args.batch_tokens})")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    sentences = load_corpus(args.corpus)
    rows = pack_rows([min(len(s) + 2, args.row_tokens) for s in sentences], args.row_tokens, random.Random(0))
    rows_per_batch = args.batch_tokens // args.row_tokens
    epoch = PackedRows(Sentences(sentences), rows, args.row_tokens, rows_per_batch, args.vocab - 1)
    data = [(*epoch[i], epoch.predicted[i]) for i in range(min(args.batches, len(epoch)))]
    torch.manual_seed(0)
    model = build_lm(args.kind, args.vocab, "mini", n_layers=args.n_layers, d_model=args.d_model,
                     n_heads=args.n_heads, d_ff=args.d_ff, dropout=0.0, max_positions=args.row_tokens).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def one_pass():
        for tokens, sentences, _ in data:
            with autocast("cpu", args.dtype):
                loss_sum, n = model.packed_loss(tokens, sentences)
            (loss_sum / n).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    one_pass()
    start = time.process_time()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        one_pass()
    seconds = time.process_time() - start
    predicted = sum(n for _, _, n in data)
    print(f"{args.kind}, {args.dtype}, d_model {args.d_model}, {args.n_layers} layers, {len(data)} batches of rows of "
          f"{args.row_tokens} tokens, {args.batch_tokens} a batch ({predicted} predicted) from {args.corpus}, "
          f"{args.threads} threads: "
          f"{seconds:.2f} CPU s under the profiler")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=60))


if __name__ == "__main__":
    main()
