#!/usr/bin/env python3
"""Training speed through the real `slm-lm-train` path next to the bare step, in one run.

Real path: ESPnet's trainer as `slm-lm-train` runs it (`SlmLMTask.main`, in this process): the recipe's
LM config (`--config`, `{kind}` filled in) with the model size `--size` (`config`: its own), its data
loader over an ESPnet text file of real book sentences with the shipped BPE, length-bucketed batches of
mixed lengths and their padding, the reporter and its logging, grad clipping, the scheduler. Only `train_one_epoch` is
timed (a `Trainer` subclass times it), so process start-up, model building, validation and checkpoint
saving are left out; data loading and tokenisation happen inside it (num_workers 0) and are counted.
Tokens/s counts real tokens only: each sentence's pieces + its two `<sos/eos>`, no padding.

Bare step: `slm_lm.pretrain.throughput.train_step` (model.loss + backward + AdamW) on random `--length`-token rows
without padding, on a model of the same kind, size and vocabulary, `--tokens` tokens a batch; the real
path's `batch_bins` is set so its batches hold the same number of real tokens on average.

Bare step on real batches: the same bare step fed the real path's batches of that epoch (its shapes and
padding without its trainer), so real/bare splits into the cost of real shapes and that of the trainer.

Interleaving: after every real epoch (`--iters` updates) the hook runs both bare paths on `--iters`
batches each, so a load that changes hits all three alike. The first epoch of each is a warm-up; the
table gives the median of the `--epochs` others. Model FLOP/s = 6 x parameters x tokens/s; MFU against
the fp32 (and, with `--dtype bfloat16`, bf16) n x n matmul peak measured in the same run. The real path's
bf16 is `model_conf: {autocast: bfloat16}` (ESPnet's `use_amp` autocasts CUDA only).

Text: `--text` (one sentence a line) or the first `--books` books of `slm-data get books` (the data directory)
prepared with `slm-prepare-lm-text`'s code. Example:
    python local/benchmarks/bench_train_real.py --kinds slm,clm --size mini --tokens 2048 --threads 1 --epochs 7
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from espnet2.train.trainer import Trainer

from slm_lm.data import datasets
from slm_lm.model.config import SIZES, lm_config
from slm_lm.common.errors import InputError, fail
from slm_lm.espnet_lm.checks import kind_token_list
from slm_lm.espnet_lm.data import write_espnet_text
from slm_lm.espnet_lm.espnet_model import sentence_batch
from slm_lm.espnet_lm.task import SlmLMTask
from slm_lm.common.fileio import write_atomic
from slm_lm.data.lm_text import PrepConfig, prepare_lm_text
from slm_lm.model.kinds import model_from_config
from slm_lm.pretrain.throughput import kind_list, matmul_tflops, random_batch, train_step

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "slm_lm" / "pretrained" / "slm-books"
CONFIG = REPO / "egs" / "librispeech_slm" / "conf" / "train_lm_{kind}_mini.yaml"
VALID_SENTENCES = 20  # ESPnet needs a validation set; it is not timed
PATHS = ("bare", "bare, real batches", "real")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kinds", type=kind_list, default="slm,clm", help="comma-separated LM kinds")
    p.add_argument("--size", default="mini", choices=sorted(SIZES) + ["config"],
                   help="model size; config: the config's own lm_conf (the recipe's mini LM: 2 layers, d_model 128)")
    p.add_argument("--tokens", type=int, default=2048, help="real tokens per batch, <sos/eos> included")
    p.add_argument("--length", type=int, default=32, help="tokens per row of the bare step's batches")
    p.add_argument("--epochs", type=int, default=7, help="timed epochs (real) and step groups (bare) per kind")
    p.add_argument("--iters", type=int, default=4, help="updates per epoch (real) and per group (bare)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="autocast dtype (float32: none)")
    p.add_argument("--matmul-size", type=int, default=2048, help="n of the n x n matmul peaks for MFU")
    p.add_argument("--config", default=str(CONFIG), help="ESPnet LM config; {kind} is replaced by the kind")
    p.add_argument("--text", help="one sentence a line (default: prepared from --books books of slm-data get books)")
    p.add_argument("--books", type=int, default=3, help="how many books to prepare when no --text")
    p.add_argument("--tokenizer", default=str(TOKENIZER), help="directory with bpe.model and tokens.txt")
    p.add_argument("--work-dir", help="where the ESPnet data and experiments go (default: a temporary dir)")
    p.add_argument("--json", help="also write the results here (atomically)")
    args = p.parse_args(argv)
    if args.tokens < args.length or args.length < 3 or args.epochs < 1 or args.iters < 1:
        p.error("need --length >= 3, --tokens >= --length, --epochs >= 1 and --iters >= 1")
    return args


def espnet_data(args, work: Path) -> dict:
    """ESPnet `text`/`text_shape` dirs `work`/train and `work`/valid (its last VALID_SENTENCES) from
    real sentences; their number and mean pieces. Bad text raises `InputError` naming file and line."""
    if args.text is None:
        text = work / "sentences.txt"
        books = sorted(datasets.require("books").glob("*.txt.gz"))[: args.books]
        prepare_lm_text(books, text, config=PrepConfig(valid_every=0), report=work / "sentences.report.json")
    else:
        text = Path(args.text)
        outputs = {(work / split / name).resolve() for split in ("all", "train", "valid")
                   for name in ("text", "text_shape")}
        if text.resolve() in outputs:
            raise InputError(f"{text}: the input would be replaced by the benchmark's data; give another --work-dir")
    write_espnet_text(text, work / "all", Path(args.tokenizer) / "bpe.model")
    for name in ("text", "text_shape"):
        lines = (work / "all" / name).read_text(encoding="utf-8").splitlines(keepends=True)
        if len(lines) <= VALID_SENTENCES:
            raise InputError(f"{text}: {len(lines)} sentences; the benchmark needs more than {VALID_SENTENCES}")
        write_atomic(work / "train" / name, "".join(lines[:-VALID_SENTENCES]))
        write_atomic(work / "valid" / name, "".join(lines[-VALID_SENTENCES:]))
    pieces = [int(line.split()[1]) for line in (work / "train" / "text_shape").read_text().splitlines()]
    return dict(work=work, sentences=len(pieces), mean_pieces=statistics.mean(pieces))


def real_path_config(args, kind: str, data: dict, out: Path) -> Path:
    """The recipe config of `kind` with the benchmark's size, batch size and epochs."""
    config = yaml.safe_load(Path(args.config.format(kind=kind)).read_text())
    mean = data["mean_pieces"]
    if args.size != "config":
        config["lm_conf"] = {"size": args.size, "max_positions": config["lm_conf"].get("max_positions", 512)}
    config.update(
        # batch_bins counts (padded) pieces; a sentence's real tokens are its pieces + 2
        batch_bins=round(args.tokens * mean / (mean + 2)),
        max_epoch=args.epochs + 1, num_iters_per_epoch=args.iters, keep_nbest_models=1,
        use_matplotlib=False, use_tensorboard=False,
    )
    if args.dtype != "float32":
        config["model_conf"] = {"autocast": args.dtype}
    path = out.with_suffix(".yaml")
    write_atomic(path, yaml.safe_dump(config))
    return path


def counted(iterator, counts: dict, batches: list):
    """Yield ESPnet's batches unchanged, adding their real and padded tokens (<sos/eos> included) to
    `counts` and keeping them in `batches`."""
    for utt_ids, batch in iterator:
        lengths = batch["text_lengths"] + 2
        counts["real"] += int(lengths.sum())
        counts["padded"] += len(lengths) * int(lengths.max())
        counts["batches"] += 1
        batches.append((batch["text"], batch["text_lengths"]))
        yield utt_ids, batch


def timed_task(epochs: list, after_epoch):
    """`SlmLMTask` whose trainer times each `train_one_epoch`, appends its counts to `epochs`, then calls
    `after_epoch(batches)` with that epoch's ESPnet batches, outside the timed span."""

    class TimedTrainer(Trainer):
        @classmethod
        def train_one_epoch(cls, **kwargs):
            counts, batches = dict(real=0, padded=0, batches=0), []
            kwargs["iterator"] = counted(kwargs["iterator"], counts, batches)
            start = time.perf_counter()
            result = super().train_one_epoch(**kwargs)
            epochs.append(dict(counts, seconds=time.perf_counter() - start))
            after_epoch(batches)
            return result

    return type("TimedLMTask", (SlmLMTask,), {"trainer": TimedTrainer})


def timed_steps(model, optimizer, batches: list, dtype) -> dict:
    """Bare steps on `batches` of (tokens, lengths): real and padded tokens, seconds."""
    start = time.perf_counter()
    for tokens, lengths in batches:
        train_step(model, optimizer, tokens, lengths, dtype)
    return dict(real=sum(int(lengths.sum()) for _, lengths in batches), padded=sum(t.numel() for t, _ in batches),
                batches=len(batches), seconds=time.perf_counter() - start)


def reporter_means(out: Path, epochs: range) -> dict:
    """ESPnet's own per-update times (s) of the real path, averaged over `epochs`, from its checkpoint."""
    stats = torch.load(out / "checkpoint.pth", map_location="cpu", weights_only=False)["reporter"]["stats"]
    keys = ("iter_time", "forward_time", "backward_time", "optim_step_time", "train_time")
    return {key: statistics.mean(float(stats[e]["train"][key]) for e in epochs) for key in keys}


def bench_kind(args, kind: str, data: dict, dtype) -> dict:
    """Per-epoch timings of `kind`, interleaved: the real path's epoch, then the bare step on random rows
    and on that epoch's real batches (the real path's shapes without its trainer)."""
    tokenizer = Path(args.tokenizer)
    vocab = len(kind_token_list(kind, tokenizer / "tokens.txt"))
    out = data["work"] / f"exp_{kind}"
    config = real_path_config(args, kind, data, out)
    cfg = lm_config(kind, vocab, yaml.safe_load(config.read_text())["lm_conf"], str(config))
    torch.manual_seed(0)
    model = model_from_config(cfg).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
    generator = torch.Generator().manual_seed(0)
    random_rows = [random_batch(vocab, args.tokens // args.length, args.length, torch.device("cpu"), generator)
                   for _ in range(args.iters)]
    times = {path: [] for path in PATHS}

    def bare_groups(real_batches):
        times["bare"].append(timed_steps(model, optimizer, random_rows, dtype))
        sentences = [sentence_batch(text[:, : int(lengths.max())], lengths, vocab - 1)
                     for text, lengths in real_batches]
        times["bare, real batches"].append(timed_steps(model, optimizer, sentences, dtype))
        print(f"{kind}: epoch {len(times['real'])}/{args.epochs + 1}, tokens/s: "
              + ", ".join(f"{path} {t[-1]['real'] / t[-1]['seconds']:.0f}" for path, t in times.items()),
              file=sys.stderr, flush=True)

    tok = str(tokenizer)
    timed_task(times["real"], bare_groups).main(cmd=[
        "--config", str(config), "--ngpu", "0", "--token_type", "bpe",
        "--token_list", f"{tok}/tokens.txt", "--bpemodel", f"{tok}/bpe.model",
        "--train_data_path_and_name_and_type", f"{data['work']}/train/text,text,text",
        "--train_shape_file", f"{data['work']}/train/text_shape",
        "--valid_data_path_and_name_and_type", f"{data['work']}/valid/text,text,text",
        "--valid_shape_file", f"{data['work']}/valid/text_shape", "--output_dir", str(out)])
    return dict(params=sum(p.numel() for p in model.parameters()), times={p: t[1:] for p, t in times.items()},
                reporter=reporter_means(out, range(2, args.epochs + 2)))


def summary(kind: str, path: str, params: int, epochs: list, peaks: dict) -> dict:
    """Median tokens/s over `epochs` and what follows from it."""
    tokens_per_s = statistics.median(e["real"] / e["seconds"] for e in epochs)
    batches = sum(e["batches"] for e in epochs)
    row = dict(kind=kind, path=path, params_m=params / 1e6, tokens_per_batch=sum(e["real"] for e in epochs) / batches,
               pad=1 - sum(e["real"] for e in epochs) / sum(e["padded"] for e in epochs),
               tokens_per_s=tokens_per_s, model_tflops=6 * params * tokens_per_s / 1e12)
    row.update({f"mfu_{name}": row["model_tflops"] / peak for name, peak in peaks.items()})
    return row


def print_tables(args, rows: list, breakdown: dict, peaks: dict, loads: list, data: dict) -> None:
    """The speed table (every kind and path) and where the real path's time goes (ESPnet's reporter)."""
    print(f"size {args.size}, {args.threads} threads, {args.dtype}, {args.tokens} tokens/batch, median of "
          f"{args.epochs} epochs x {args.iters} updates; real path: {data['sentences']} book sentences, "
          f"{data['mean_pieces']:.1f} pieces each on average; bare: rows of {args.length}; "
          + ", ".join(f"{args.matmul_size}^2 {name} matmul peak {peak:.3g} TFLOP/s" for name, peak in peaks.items())
          + f"; load average {loads[0]:.2f} at start, {loads[1]:.2f} at end")
    print("| kind | path | params (M) | real tokens/batch | padding | tokens/s | real/bare "
          "| model TFLOP/s (6*N*tokens/s) | "
          + " | ".join(f"MFU vs {name}" for name in peaks) + " |")
    print("|---|---|---|---|---|---|---|---|" + "---|" * len(peaks))
    for r in rows:
        mfu = " | ".join(f"{100 * r[f'mfu_{name}']:.1f} %" for name in peaks)
        print(f"| {r['kind']} | {r['path']} | {r['params_m']:.2f} | {r['tokens_per_batch']:.0f} | "
              f"{100 * r['pad']:.1f} % | {r['tokens_per_s']:.0f} | {r['real_vs_bare']:.2f} | "
              f"{r['model_tflops']:.3g} | {mfu} |")
    print("\nReal path, s/update from ESPnet's reporter (mean of the timed epochs); other = grad-norm clipping, "
          "zero_grad, reporter; last column: the bare step on the same batches")
    print("| kind | data loading | forward | backward | optimizer + scheduler | other | total "
          "| bare step, same batches |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, b in breakdown.items():
        other = b["train_time"] - b["iter_time"] - b["forward_time"] - b["backward_time"] - b["optim_step_time"]
        print(f"| {kind} | {b['iter_time']:.3f} | {b['forward_time']:.3f} | {b['backward_time']:.3f} | "
              f"{b['optim_step_time']:.3f} | {other:.3f} | {b['train_time']:.3f} | {b['bare_same_batches']:.3f} |")


def main(argv=None):
    args = parse_args(argv)
    loads = [os.getloadavg()[0]]
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    with tempfile.TemporaryDirectory(prefix="bench_train_real.") as tmp:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        try:
            data = espnet_data(args, work)
        except InputError as e:
            fail("bench_train_real", e)
        peaks = {"fp32": matmul_tflops(args.matmul_size, torch.float32, torch.device("cpu"))}
        if dtype == torch.bfloat16:
            peaks["bf16"] = matmul_tflops(args.matmul_size, torch.bfloat16, torch.device("cpu"))
        rows, breakdown = [], {}
        for kind in args.kinds:
            measured = bench_kind(args, kind, data, dtype)
            torch.set_num_threads(args.threads)  # in case the trainer changed it
            kind_rows = [summary(kind, path, measured["params"], measured["times"][path], peaks) for path in PATHS]
            for row in kind_rows:
                row["real_vs_bare"] = row["tokens_per_s"] / kind_rows[0]["tokens_per_s"]
            rows += kind_rows
            same = measured["times"]["bare, real batches"]
            breakdown[kind] = dict(measured["reporter"], bare_same_batches=sum(e["seconds"] for e in same)
                                   / sum(e["batches"] for e in same))
    loads.append(os.getloadavg()[0])
    print_tables(args, rows, breakdown, peaks, loads, data)
    if args.json:
        write_atomic(args.json, json.dumps(dict(vars(args), matmul_peaks_tflops=peaks, load_average=loads,
                                                 sentences=data["sentences"], mean_pieces=data["mean_pieces"],
                                                 rows=rows, real_path_seconds_per_update=breakdown), indent=2))


if __name__ == "__main__":
    main()
