#!/usr/bin/env python3
"""The SLM's attention: SDPA with boolean masks against FlexAttention with block masks (the same masks).

Scoring: `--rows` sentences of random lengths up to `--length` tokens in one padded batch (as an N-best
list), token log-probs with each attention: the largest |difference| in nats, and the median time of
`--repeats` calls, the two interleaved. Training (CUDA only: FlexAttention has no backward on CPU): one
forward + backward of the SLM's loss on `--tokens` tokens in rows of `--length`: the loss and gradient
differences and the median step time. FlexAttention's first call on a shape compiles its kernels; that
call is timed apart ("first call"). The JSON is rewritten after each part, so a run cut short keeps what
it measured.

Example: python local/benchmarks/bench_attention.py --device cuda --dtype bfloat16 --n-layers 6 --d-model 384 \
             --n-heads 6 --d-ff 1536 --json exp/bench/attention.json
"""
import argparse
import json
import statistics
import time

import torch

from slm_lm import build_lm
from slm_lm.common.fileio import write_atomic
from slm_lm.pretrain.throughput import add_shape_options, random_batch, shape_overrides, synchronize

ATTENTIONS = ("sdpa", "flex")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_options(p, size="small")
    p.add_argument("--vocab", type=int, default=5003, help="vocabulary size (BPE 5000 + specials)")
    p.add_argument("--rows", type=int, default=100, help="sentences in the scored batch")
    p.add_argument("--length", type=int, default=64, help="longest scored sentence; training row length")
    p.add_argument("--tokens", type=int, default=32768, help="tokens per training batch (rows of --length)")
    p.add_argument("--repeats", type=int, default=7, help="timed calls of each attention, interleaved")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="autocast dtype")
    p.add_argument("--json", help="write the results here (atomically, after each part)")
    args = p.parse_args(argv)
    if args.length < 3 or args.rows < 1 or args.tokens < args.length or args.repeats < 1:
        p.error("need --length >= 3, --rows >= 1, --tokens >= --length and --repeats >= 1")
    args.shape = shape_overrides(args)
    return args


def scored_batch(args, device, generator):
    """--rows sentences of random lengths in [3, --length], right-padded."""
    lengths = torch.randint(3, args.length + 1, (args.rows,), generator=generator)
    tokens, _ = random_batch(args.vocab, args.rows, args.length, "cpu", generator)
    tokens[torch.arange(args.rows), lengths - 1] = args.vocab - 1  # each row's </s>
    tokens[torch.arange(args.length)[None, :] >= lengths[:, None]] = 0
    return tokens.to(device), lengths.to(device)


def timed(call, device):
    synchronize(device)
    start = time.perf_counter()
    out = call()
    synchronize(device)
    return out, time.perf_counter() - start


def compare(model, call, device, repeats: int) -> dict:
    """Run `call()` with each attention: the outputs of the first calls, first-call and median seconds."""
    outputs, first, times = {}, {}, {a: [] for a in ATTENTIONS}
    for attention in ATTENTIONS:
        model.attention = attention
        outputs[attention], first[attention] = timed(call, device)
    for _ in range(repeats):
        for attention in ATTENTIONS:
            model.attention = attention
            times[attention].append(timed(call, device)[1])
    model.attention = "sdpa"
    return outputs, {a: {"first_call_s": first[a], "median_s": statistics.median(times[a])} for a in ATTENTIONS}


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = build_lm("slm", args.vocab, args.size, max_positions=max(512, args.length), dropout=0.0, **args.shape)
    model = model.to(device)
    params = sum(p.numel() for p in model.parameters())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    results = dict(vars(args), device_name=name, params_m=params / 1e6)

    def autocast():
        return torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)

    def save():
        if args.json:
            write_atomic(args.json, json.dumps(results, indent=2))

    model.eval()
    tokens, lengths = scored_batch(args, device, generator)

    def score():
        with torch.no_grad(), autocast():
            return model.token_logprobs(tokens, lengths).float()

    outputs, times = compare(model, score, device, args.repeats)
    results["scoring"] = dict(times, max_abs_diff_nats=float((outputs["flex"] - outputs["sdpa"]).abs().max()),
                              tokens=int(lengths.sum()))
    save()
    print(f"SLM {params / 1e6:.1f}M, {args.dtype}, {name}; scoring {args.rows} sentences of 3..{args.length} "
          f"tokens, median of {args.repeats} interleaved calls")
    print("| part | attention | first call (s) | median (s) | vs sdpa |")
    print("|---|---|---|---|---|")
    parts = ["scoring"]
    if device.type == "cuda":
        model.train()
        train_tokens, train_lengths = random_batch(args.vocab, args.tokens // args.length, args.length, device, generator)

        def step():
            model.zero_grad(set_to_none=True)
            with autocast():
                loss_sum, n = model.loss(train_tokens, train_lengths)
            (loss_sum / n).backward()
            return float(loss_sum / n), torch.cat([p.grad.flatten().float() for p in model.parameters()])

        outputs, times = compare(model, step, device, args.repeats)
        (loss_s, grad_s), (loss_f, grad_f) = outputs["sdpa"], outputs["flex"]
        results["training"] = dict(times, loss_diff=abs(loss_f - loss_s),
                                   grad_rel_diff=float((grad_f - grad_s).norm() / grad_s.norm()),
                                   tokens=int(train_lengths.sum()))
        save()
        parts.append("training")
    else:
        results["training"] = "not measured: FlexAttention has no backward on CPU"
        save()
    for part in parts:
        for attention in ATTENTIONS:
            r = results[part][attention]
            ratio = results[part]["sdpa"]["median_s"] / r["median_s"]
            print(f"| {part} | {attention} | {r['first_call_s']:.3f} | {r['median_s']:.4f} | {ratio:.2f}x |")
    print(f"scores: max |flex - sdpa| {results['scoring']['max_abs_diff_nats']:.2e} nats")
    if "training" in parts:
        print(f"training: |loss diff| {results['training']['loss_diff']:.2e}, "
              f"gradient relative diff {results['training']['grad_rel_diff']:.2e}")
    else:
        print(f"training: {results['training']}")


if __name__ == "__main__":
    main()
