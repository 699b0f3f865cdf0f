#!/usr/bin/env python3
"""Training speed of slm-pretrain's step, the packed step it runs against the padded step it ran before, in one run.

Every path trains `--kinds` of one shape on the sentences of an encoded corpus (`--data`: train.ids.xz, valid.ids.xz
and their tokenizer, as `slm-pretrain train` reads them) with dropout as trained, autocast to `--dtype`, gradient
clipping and AdamW, each kind and path from the same initial weights:

  padded    the step before packing: length-bucketed batches of at most `--tokens` padded tokens, collated on the
            host at every step and copied to the device; the loss read through the padded scoring entry
            (`-token_logprobs(...).sum()`: the head on the scored positions only, picked by boolean indexing, and
            the token count read back to the host); foreach AdamW off CUDA
  packed    slm-pretrain's own step (`_TrainingRun.update`): rows of `--row-tokens` tokens packed with whole
            sentences, `--tokens` a batch, an epoch's rows on the device, nothing read back, fused AdamW; the
            time to pack an epoch (`epoch_rows`, timed apart) is spread over its batches and counted
  compiled  the packed step compiled (`--compile`: forward and backward, fullgraph, one shape); its compile time
            is printed

Each --widths x --tokens configuration is measured in turn (the JSON is written after each). Paths and kinds
take turns, `--group` steps at a time (on CUDA the group is timed from one synchronisation to the
next, so a step that need not wait for the device can queue the next); the figure is the median over `--rounds`
groups after one warm-up group. Tokens/s counts real tokens (each sentence's pieces, `<s>` and `</s>`; no
padding). Model FLOP/s = 6 x parameters x tokens/s; MFU against the `--dtype` n x n matmul peak measured in the
same run. "counted" is the model's own FLOPs of a step (`torch.utils.flop_counter`, forward and backward: the
attention, the SLM's streams and the padding included) per second, and its share of that peak.

Example (CPU): python local/benchmarks/bench_pretrain_step.py --data exp/bench/books --kinds slm,clm --size mini \
                   --tokens 2048 --row-tokens 128 --threads 2 --compile
"""
import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from slm_lm.model.backbone import PADDING
from slm_lm.model.config import SIZES
from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import write_atomic
from slm_lm.model.kinds import model_from_config
from slm_lm.model.precision import autocast
from slm_lm.pretrain import PretrainSettings
from slm_lm.pretrain.trainer import _TrainingRun, training_data
from slm_lm.pretrain.throughput import add_shape_options, kind_list, matmul_tflops, shape_overrides, synchronize

PATHS = ("padded", "packed", "compiled")


def int_list(text: str) -> list:
    """A comma-separated list of positive integers (an argparse `type`)."""
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a comma-separated list of integers") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every number must be 1 or more")
    return values


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="train.ids.xz, valid.ids.xz, bpe.model, tokens.txt")
    p.add_argument("--sentences", type=int, default=0, help="train on the first N sentences only (0: all)")
    p.add_argument("--kinds", type=kind_list, default="slm,clm", help="comma-separated LM kinds")
    add_shape_options(p, size="mini")
    p.add_argument("--max-positions", type=int, default=256)
    p.add_argument("--tokens", type=int_list, default="4096",
                   help="tokens per batch, padding included; comma-separated: each measured")
    p.add_argument("--widths", type=int_list, default="",
                   help="comma-separated d_model of the shapes measured (heads of 64, d_ff 4 x d_model; default: "
                        "the --size shape)")
    p.add_argument("--row-tokens", type=int, default=0, help="tokens per packed row (default: --max-positions)")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--compile", action="store_true", help="also time the compiled packed step")
    p.add_argument("--group", type=int, default=5, help="consecutive steps of one path timed together")
    p.add_argument("--rounds", type=int, default=7, help="timed groups per kind and path")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="autocast dtype")
    p.add_argument("--matmul-size", type=int, default=2048, help="n of the n x n matmul peak for MFU")
    p.add_argument("--json", help="also write the results here (atomically)")
    args = p.parse_args(argv)
    if args.group < 1 or args.rounds < 1:
        p.error("need --group >= 1 and --rounds >= 1")
    args.shape = shape_overrides(args)
    args.paths = PATHS if args.compile else PATHS[:2]
    return args


def bucketed_batches(lengths: list, max_tokens: int, rng: random.Random, pool: int = 100) -> list:
    """The padded step's batches: index lists of sentences of similar length, each padding to at most
    `max_tokens` tokens (the order shuffled, sorted by length in pools of about `pool` batches, batches shuffled)."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    chunk = max(1, pool * max_tokens // max(1, sum(lengths) // len(lengths)))
    out = []
    for start in range(0, len(order), chunk):
        batch = []
        for i in sorted(order[start : start + chunk], key=lambda i: lengths[i]):
            if batch and (len(batch) + 1) * lengths[i] > max_tokens:
                out.append(batch)
                batch = []
            batch.append(i)
        out.append(batch)
    rng.shuffle(out)
    return out


def collate(sentences: list, index: list, sos_eos: int, max_positions: int):
    """The padded step's batch: (tokens [B, T], lengths [B]) of `<s> pieces </s>` rows, pieces cut to the positions."""
    rows = [sentences[i][: max_positions - 2] for i in index]
    tokens = np.zeros((len(rows), max(len(r) for r in rows) + 2), dtype=np.int64)
    for r, row in enumerate(rows):
        tokens[r, 1 : len(row) + 1] = row
        tokens[r, 0] = tokens[r, len(row) + 1] = sos_eos
    return torch.from_numpy(tokens), torch.tensor([len(r) + 2 for r in rows])


class PaddedPath:
    """The padded step on its own copy of the model (same initial weights) and a foreach (CUDA: fused) AdamW;
    the batches' `real` tokens."""

    def __init__(self, run: _TrainingRun, max_tokens: int):
        torch.manual_seed(run.settings.seed)
        self.run, self.model = run, model_from_config(run.model.config).to(run.device).train()
        self.model.load_state_dict(run.model.state_dict())
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-6,
                                           weight_decay=0.01, fused=run.device.type == "cuda")
        lengths = [len(s) + 2 for s in run.train_set]
        self.batches = bucketed_batches(lengths, max_tokens, random.Random(0))
        self.real = [sum(min(lengths[i], run.model.config.max_positions) for i in b) for b in self.batches]

    def step(self, i: int) -> None:
        run, model = self.run, self.model
        tokens, lengths = collate(run.train_set, self.batches[i % len(self.batches)], run.tokenizer.eos_id,
                                  model.config.max_positions)
        if run.device.type == "cuda":
            tokens, lengths = tokens.pin_memory(), lengths.pin_memory()
        tokens, lengths = tokens.to(run.device, non_blocking=True), lengths.to(run.device, non_blocking=True)
        with autocast(run.device, run.dtype):
            loss_sum, n = -model.token_logprobs(tokens, lengths).sum(), int((lengths - 1).sum())
        (loss_sum / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def flops_per_token(self) -> float:
        tokens, lengths = collate(self.run.train_set, self.batches[0], self.run.tokenizer.eos_id,
                                  self.model.config.max_positions)
        with FlopCounterMode(display=False) as counter:
            with autocast(self.run.device, self.run.dtype):
                loss = -self.model.token_logprobs(tokens.to(self.run.device), lengths.to(self.run.device)).sum()
            loss.backward()
        self.model.zero_grad(set_to_none=True)
        return counter.get_total_flops() / int(lengths.sum())


class PackedPath:
    """slm-pretrain's step (`_TrainingRun.update`) on an epoch of packed rows; `packing`: that epoch's packing time."""

    def __init__(self, run: _TrainingRun):
        self.run = run
        began = time.perf_counter()
        self.epoch = run.epoch_rows(0)
        synchronize(run.device)
        self.packing = time.perf_counter() - began
        self.real = (self.epoch.sentences != PADDING).flatten(1).sum(dim=1).tolist()

    def step(self, i: int) -> None:
        self.run.update(self.epoch, i % len(self.epoch))

    def flops_per_token(self) -> float:
        with FlopCounterMode(display=False) as counter:
            loss_sum, n = self.run.loss(*self.epoch[0])
            (loss_sum / n).backward()
        self.run.model.zero_grad(set_to_none=True)
        return counter.get_total_flops() / self.real[0]


def training_run(args, kind: str, path: str, out: Path, data: tuple, shape: dict, tokens: int) -> _TrainingRun:
    """A `_TrainingRun` of `kind` and `shape` on `data` (`training_data`), `tokens` a batch, as slm-pretrain would
    start it with these options (compiled for `path` compiled)."""
    model_args = dict(SIZES[args.size], dropout=args.dropout, max_positions=args.max_positions, **shape)
    settings = PretrainSettings(kind=kind, data_dir=Path(args.data), out_dir=out, model_args=model_args, updates=1,
                                batch_tokens=tokens, row_tokens=args.row_tokens, device=args.device,
                                dtype=args.dtype, compile="on" if path == "compiled" else "off")
    settings.check()
    out.mkdir()
    return _TrainingRun(settings, data)


def measure(args, data: tuple, shape: dict, tokens: int, work: Path) -> dict:
    """Every kind and path at `shape` and `tokens` a batch: (seconds, real tokens) of each timed group, the
    counted FLOPs per real token, and the setups."""
    device = torch.device(args.device)
    setups = {}
    for kind in args.kinds:
        for path in args.paths:
            run = training_run(args, kind, "packed" if path == "padded" else path, work / f"{kind}-{path}", data,
                               shape, tokens)
            setups[kind, path] = PaddedPath(run, tokens) if path == "padded" else PackedPath(run)
            print(f"{kind} {path}: ready" + (f", compiled in {run.card['compile_seconds']} s"
                                             if path == "compiled" else ""), file=sys.stderr, flush=True)
    times = {key: [] for key in setups}
    steps = {key: 0 for key in setups}
    for round_ in range(args.rounds + 1):
        for key, setup in setups.items():
            synchronize(device)
            began = time.perf_counter()
            for _ in range(args.group):
                setup.step(steps[key])
                steps[key] += 1
            synchronize(device)
            if round_:  # the first round warms up
                real = sum(setup.real[i % len(setup.real)] for i in range(steps[key] - args.group, steps[key]))
                times[key].append((time.perf_counter() - began, real))
        print(f"round {round_}/{args.rounds} done", file=sys.stderr, flush=True)
    return dict(times=times, counted={key: setup.flops_per_token() for key, setup in setups.items()}, setups=setups)


def summary(args, measured: dict, shape: dict, tokens: int, peak: float) -> list:
    """A result row per kind and path of one `measure`."""
    results = []
    for (kind, path), setup in measured["setups"].items():
        times, counted, run = measured["times"][kind, path], measured["counted"][kind, path], setup.run
        params = sum(p.numel() for p in run.model.parameters())
        seconds = statistics.median(s / args.group for s, _ in times)
        real = statistics.median(r / args.group for _, r in times)
        packing = setup.packing / len(setup.epoch) if path != "padded" else 0.0
        tokens_per_s = real / (seconds + packing)
        model_tflops = 6 * params * tokens_per_s / 1e12
        results.append(dict(kind=kind, path=path, d_model=run.model.config.d_model, n_layers=run.model.config.n_layers,
                            batch_tokens=tokens, params=params, seconds_per_step=seconds, packing_per_step=packing,
                            real_tokens_per_step=real, tokens_per_s=tokens_per_s, model_tflops=model_tflops,
                            mfu=model_tflops / peak, counted_flops_per_token=counted,
                            counted_share=counted * tokens_per_s / 1e12 / peak, vs_6n=counted / (6 * params),
                            compile_seconds=run.card.get("compile_seconds")))
    for r in results:
        r["vs_padded"] = r["tokens_per_s"] / next(x["tokens_per_s"] for x in results
                                                  if x["kind"] == r["kind"] and x["path"] == "padded")
    return results


def shapes(args) -> list:
    """(shape overrides, tokens a batch) of every configuration: each --widths width (heads of 64, d_ff 4x) or the
    --size shape, at each --tokens."""
    widths = [dict(args.shape, d_model=w, n_heads=w // 64, d_ff=4 * w) for w in args.widths] or [args.shape]
    return [(shape, tokens) for shape in widths for tokens in args.tokens]


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    loads = [os.getloadavg()[0]]
    device = torch.device(args.device)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = matmul_tflops(args.matmul_size, getattr(torch, args.dtype), device)
    try:
        tokenizer, train, valid = training_data(Path(args.data), 64)
    except InputError as e:
        fail("bench_pretrain_step", e)
    data = (tokenizer, train[: args.sentences] if args.sentences else train, valid)
    corpus_tokens = sum(len(sentence) + 2 for sentence in train)  # one pass over all of train.ids.xz
    results = []
    for number, (shape, tokens) in enumerate(shapes(args)):
        with tempfile.TemporaryDirectory(prefix="bench_pretrain_step.") as tmp:
            try:
                measured = measure(args, data, shape, tokens, Path(tmp))
            except (InputError, ValueError) as e:
                fail("bench_pretrain_step", e)
        results += summary(args, measured, shape, tokens, peak)
        loads.append(os.getloadavg()[0])
        if args.json:  # after every configuration: a run stopped by a time limit keeps what it measured
            write_atomic(args.json, json.dumps(dict({k: v for k, v in vars(args).items()}, device_name=device_name,
                                                    matmul_peak_tflops=peak, load_average=loads,
                                                    corpus_tokens=corpus_tokens, results=results),
                                               indent=2))
    print(f"size {args.size}{''.join(f', {k} {v}' for k, v in args.shape.items())}, max positions "
          f"{args.max_positions}, rows of {args.row_tokens or args.max_positions}, dropout {args.dropout}, "
          f"{args.dtype},"
          f" {args.threads} threads, {args.device} ({device_name}); median of {args.rounds} groups of {args.group} "
          f"steps, paths interleaved; {args.dtype} {args.matmul_size}^2 matmul peak {peak:.3g} TFLOP/s; load average "
          f"{loads[0]:.2f} at start, {loads[-1]:.2f} at end")
    print("| kind | layers x d_model | batch tokens | path | params (M) | ms/step | real tokens/step | tokens/s "
          "| vs padded | MFU (6·N) | counted FLOPs / 6·N | counted share of peak | compile (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['kind']} | {r['n_layers']} x {r['d_model']} | {r['batch_tokens']} | {r['path']} | "
              f"{r['params'] / 1e6:.2f} | {1e3 * (r['seconds_per_step'] + r['packing_per_step']):.1f} | "
              f"{r['real_tokens_per_step']:.0f} | {r['tokens_per_s']:.0f} | {r['vs_padded']:.2f} | "
              f"{100 * r['mfu']:.1f} % | {r['vs_6n']:.2f} | {100 * r['counted_share']:.1f} % | "
              f"{r['compile_seconds'] or '-'} |")


if __name__ == "__main__":
    main()
