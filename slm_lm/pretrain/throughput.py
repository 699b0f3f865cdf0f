"""Training throughput, as the repository's benchmark scripts (local/benchmarks/, local/gpu/) measure it, and
used by nothing else in the package: random token batches, one bare training step (loss, backward, optimizer
step), and the device's matmul peak that model FLOP utilisation is read against."""
import argparse
import statistics
import time

import torch

from slm_lm.common.options import number
from slm_lm.model.config import KINDS, SIZES

SHAPE_FIELDS = ("n_layers", "d_model", "n_heads", "d_ff")


def random_batch(vocab: int, rows: int, length: int, device, generator):
    """rows x length tokens: <sos/eos> ordinary pieces <sos/eos>, no padding."""
    tokens = torch.randint(2, vocab - 2, (rows, length), generator=generator)
    tokens[:, 0] = tokens[:, -1] = vocab - 1
    return tokens.to(device), torch.full((rows,), length, device=device)


def train_step(model, optimizer, tokens, lengths, dtype=torch.float32):
    """One update of `model` on a batch: mean token loss under autocast to `dtype`, backward, optimizer step."""
    with torch.autocast(tokens.device.type, dtype=dtype, enabled=dtype != torch.float32):
        loss_sum, n_predicted = model.loss(tokens, lengths)
    optimizer.zero_grad(set_to_none=True)
    (loss_sum / n_predicted).backward()
    optimizer.step()


def synchronize(device):
    """Wait for the queued kernels of a CUDA device (nothing to wait for on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_tflops(n: int, dtype, device, repeats: int = 5) -> float:
    """TFLOP/s of an n x n x n matmul in `dtype` (median of `repeats` after one warm-up)."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    times = []
    for _ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times[1:]) / 1e12


def kind_list(kinds: str) -> list:
    """The comma-separated `--kinds` option as a list (an argparse `type`: an unknown kind is a usage error)."""
    out = kinds.split(",")
    unknown = set(out) - set(KINDS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown kinds {sorted(unknown)}; choose from {KINDS}")
    return out


def add_shape_options(parser: argparse.ArgumentParser, size: str) -> None:
    """`--size` (default `size`) and `--n-layers/--d-model/--n-heads/--d-ff` overriding its fields."""
    parser.add_argument("--size", default=size, choices=sorted(SIZES))
    for name in SHAPE_FIELDS:
        parser.add_argument("--" + name.replace("_", "-"), type=number(int, 1), help=f"{name} instead of the --size one")


def shape_overrides(args) -> dict:
    """The shape fields given on the command line (see `add_shape_options`), for `build_lm(**...)`."""
    return {k: getattr(args, k) for k in SHAPE_FIELDS if getattr(args, k)}
