"""Pretrained models shipped with the package, loadable by name with no network.

Each sub-directory is a scoring-ready model (fp16 `model.safetensors`, `config.json`, `bpe.model`,
`tokens.txt`), with its model card (`README.md`, and `card.json` holding the card's figures).
`Scorer.from_pretrained(name)` and every `--model`/`--lm` option accept these names; a directory of
the same name in the working directory takes precedence.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def names() -> list:
    """Names of the shipped models."""
    return sorted(p.name for p in ROOT.iterdir() if (p / "config.json").is_file())


def path(name: str):
    """Directory of the shipped model `name`, or None if there is none of that name."""
    candidate = ROOT / str(name)
    if "/" in str(name) or not (candidate / "config.json").is_file():
        return None
    return candidate
