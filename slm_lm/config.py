"""Model configuration: one dataclass shared by every LM kind, plus the named sizes."""
from dataclasses import asdict, dataclass, fields

from slm_lm.errors import InputError

KINDS = ("slm", "clm", "mlm", "bilm", "tta")
# The kinds whose models use the <mask> token (the SLM's query stream, the MLM's masked positions, T-TA's query input).
MASK_KINDS = ("slm", "mlm", "tta")

SIZES = {
    "tiny": dict(n_layers=2, d_model=64, n_heads=4, d_ff=128),
    "mini": dict(n_layers=4, d_model=256, n_heads=4, d_ff=1024),
    "small": dict(n_layers=6, d_model=512, n_heads=8, d_ff=2048),
    "base": dict(n_layers=12, d_model=768, n_heads=12, d_ff=3072),
}


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
        if self.kind not in KINDS:
            raise ValueError(f"unknown LM kind {self.kind!r}; expected one of {KINDS}")
        if self.mask_id < 0:
            self.mask_id = self.vocab_size - 2
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        for name in ("vocab_size", "n_layers", "d_model", "n_heads", "d_ff", "max_positions"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.mask_id < self.vocab_size:
            raise ValueError(f"mask_id={self.mask_id} outside the vocabulary of {self.vocab_size}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

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
