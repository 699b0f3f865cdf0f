"""Compute precision: the dtype names our tools accept, and `auto`, bf16 where the hardware runs it natively.

bf16 autocast trains 1.5-1.8x faster than fp32 on a CPU with AMX (BENCHMARKS.md) but about 30x
slower on one without AVX-512 bf16 instructions, so a script that runs on mixed cluster nodes asks for
`auto` rather than `bfloat16`.

torch is imported by the functions that make a device or a dtype, not with the module: a command's options and
input checks run without it (about 2 s of every start).
"""
import functools

from slm_lm.common.errors import InputError, fail

DTYPES = ("float32", "bfloat16", "float16")  # names of torch dtypes
DTYPE_CHOICES = ("auto",) + DTYPES
NATIVE_BF16_CPU_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


@functools.lru_cache(maxsize=None)
def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset:
    """The instruction-set flags of the first CPU in `cpuinfo` (empty where the file does not exist)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def native_bf16(device) -> bool:
    """Whether `device` computes bf16 natively: a CUDA device that supports it, a CPU with AMX or AVX-512 bf16."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and bool(cpu_flags() & NATIVE_BF16_CPU_FLAGS)


def resolve_dtype(name: str, device) -> str:
    """`name` checked against DTYPE_CHOICES; `auto` becomes bfloat16 where `native_bf16(device)`, else float32."""
    if name == "auto":
        return "bfloat16" if native_bf16(device) else "float32"
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPE_CHOICES}, got {name!r}")
    return name


def autocast(device, name: str):
    """`torch.autocast` to the resolved dtype `name` on `device`'s type; a no-op context for float32."""
    import torch

    return torch.autocast(torch.device(device).type, dtype=getattr(torch, name), enabled=name != "float32")


DEVICE_TYPES = ("cpu", "cuda", "mps")


def check_device(name: str) -> str:
    """`name` when this machine has that device (cpu, cuda[:N], mps); InputError naming the problem otherwise."""
    if name == "cpu":
        return name
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in DEVICE_TYPES:
        raise InputError(f"--device {name}: not a device; give one of cpu, cuda, cuda:N, mps")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"--device {name}: CUDA is not available on this machine (torch sees no GPU); "
                             "use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise InputError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                             f"cuda:0..cuda:{torch.cuda.device_count() - 1}")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"--device {name}: MPS is not available on this machine; use --device cpu")
    return name


def device_option(prog: str):
    """An argparse `type` for `--device`: the name when `check_device` accepts it, else `prog: error: ...`
    on one line and exit status 2 (argparse's own error would add the usage lines)."""
    def checked(name: str) -> str:
        try:
            return check_device(name)
        except InputError as e:
            fail(prog, e)
    return checked
