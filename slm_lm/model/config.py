"""Model configuration: one dataclass shared by every LM kind, plus the named sizes."""
import math
from dataclasses import asdict, dataclass, fields

from slm_lm.common.errors import InputError

KINDS = ("slm", "clm", "mlm", "bilm", "tta")
# The kinds whose models use the <mask> token (the SLM's query stream, the MLM's masked positions, T-TA's query input).
MASK_KINDS = ("slm", "mlm", "tta")

SIZES = {
    "tiny": dict(n_layers=2, d_model=64, n_heads=4, d_ff=128),
    "mini": dict(n_layers=4, d_model=256, n_heads=4, d_ff=1024),
    "small": dict(n_layers=6, d_model=512, n_heads=8, d_ff=2048),
    "base": dict(n_layers=12, d_model=768, n_heads=12, d_ff=3072),
}

# Ceilings of the integer sizes, and of the whole model, checked before anything is allocated (a config
# that asks for more is refused, not built): far above the paper's base model (12 layers, 768 wide,
# 110M parameters) and any BERT/RoBERTa we convert, far below what would exhaust a machine's memory.
CEILINGS = {"vocab_size": 1_000_000, "n_layers": 256, "d_model": 16_384, "n_heads": 256, "d_ff": 65_536,
            "max_positions": 65_536}
MAX_PARAMETERS = 1_000_000_000
MAX_LAYER_NORM_EPS = 0.1


@dataclass
class LMConfig:
    """Hyper-parameters of one LM. `mask_id` defaults to vocab_size - 2 (ESPnet token list layout)."""

    kind: str
    vocab_size: int
    n_layers: int = 6
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    max_positions: int = 512
    dropout: float = 0.1
    mask_id: int = -1
    layer_norm_eps: float = 1e-12

    def __post_init__(self):
        if not isinstance(self.kind, str) or self.kind not in KINDS:
            raise ValueError(f"unknown LM kind {self.kind!r}; expected one of {KINDS}")
        for name, ceiling in CEILINGS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
            if not 1 <= value <= ceiling:
                raise ValueError(f"{name}={value}: must be between 1 and {ceiling:,} (the ceiling for {name})")
        for name in ("dropout", "layer_norm_eps"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r} ({type(value).__name__})")
        if not isinstance(self.mask_id, int) or isinstance(self.mask_id, bool):
            raise ValueError(f"mask_id must be an integer, got {self.mask_id!r} ({type(self.mask_id).__name__})")
        if self.mask_id < 0:
            self.mask_id = self.vocab_size - 2
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if not 0 <= self.mask_id < self.vocab_size:
            raise ValueError(f"mask_id={self.mask_id} outside the vocabulary of {self.vocab_size}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not 0.0 < self.layer_norm_eps <= MAX_LAYER_NORM_EPS:
            raise ValueError(f"layer_norm_eps must be in (0, {MAX_LAYER_NORM_EPS}], got {self.layer_norm_eps}")
        parameters = self.approximate_parameters()
        if parameters > MAX_PARAMETERS:
            raise ValueError(f"about {parameters:,} parameters, above the ceiling of {MAX_PARAMETERS:,}")

    def approximate_parameters(self) -> int:
        """Parameters of the embeddings and layers (biases and norms left out): what a model of this config
        allocates, checked before it is built."""
        embeddings = (self.vocab_size + self.max_positions) * self.d_model
        return embeddings + self.n_layers * (4 * self.d_model * self.d_model + 2 * self.d_model * self.d_ff)

    @classmethod
    def from_size(cls, kind: str, vocab_size: int, size: str = "small", **overrides) -> "LMConfig":
        """Config for a named size (tiny, mini, small, base) with keyword overrides."""
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; expected one of {tuple(SIZES)}")
        return cls(kind=kind, vocab_size=vocab_size, **{**SIZES[size], **overrides})

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LMConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}")
        return cls(**d)


def lm_config(kind: str, vocab_size: int, lm_conf: dict, where: str) -> LMConfig:
    """The `LMConfig` that ESPnet's `--lm kind --lm_conf ...` describes (`size` and any field as an override);
    bad keys or values raise `InputError` naming `where`."""
    allowed = {"size"} | {f.name for f in fields(LMConfig)} - {"kind", "vocab_size"}
    unknown = sorted(set(lm_conf) - allowed)
    if unknown:
        raise InputError(f"{where}: lm_conf: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    conf = dict(lm_conf)
    size = conf.pop("size", "small")
    if size not in SIZES:
        raise InputError(f"{where}: lm_conf: size {size!r} is not one of {sorted(SIZES)}")
    try:
        return LMConfig.from_size(kind, vocab_size, size, **conf)
    except (ValueError, TypeError) as e:
        raise InputError(f"{where}: lm_conf: {e}") from None
