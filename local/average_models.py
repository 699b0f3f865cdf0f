#!/usr/bin/env python3
"""Average the weights of saved models of one kind and shape (a "model soup"), e.g. runs continued from
the same start with other seeds: one model that scores at the cost of one.

  python local/average_models.py --model exp/pretrain/seed4/slm/model --model exp/pretrain/words280/slm/model \
      --out exp/pretrain/soup/slm

The models must have the same config (kind, shape) and tokenizer; the first one's config (with its scoring
defaults) and tokenizer are kept. Weights are averaged in float32 and saved in fp16. OUT/training.json
records the models and their training cards; OUT is written in a temporary directory and renamed into place.
"""
import argparse
import json
import tempfile
from pathlib import Path

import torch

from slm_lm.errors import InputError, fail
from slm_lm.fileio import replace_dir, write_atomic
from slm_lm.model_files import read_json, load_safetensors

MODEL_FILE, CONFIG_FILE, CARD_FILE, TOKENIZER_FILES = "model.safetensors", "config.json", "training.json", \
    ("bpe.model", "tokens.txt")


def average_models(models: list, out) -> dict:
    """Write the average of `models` (directories) to `out`; return its training card."""
    if len(models) < 2:
        raise InputError(f"give at least two models to average, got {len(models)}")
    models, out = [Path(m) for m in models], Path(out)
    if out.resolve() in [m.resolve() for m in models]:
        raise InputError(f"--out {out}: is one of the models to average; choose another directory")
    first_config = read_json(models[0] / CONFIG_FILE)["model"]
    tokenizer = [(models[0] / name).read_bytes() for name in TOKENIZER_FILES]
    total, metadata = None, None
    for model in models:
        config = read_json(model / CONFIG_FILE)["model"]
        if config != first_config:
            differ = sorted(k for k in set(config) | set(first_config) if config.get(k) != first_config.get(k))
            raise InputError(f"{model / CONFIG_FILE}: not the config of {models[0]} ({', '.join(differ)} differ)")
        if [(model / name).read_bytes() for name in TOKENIZER_FILES] != tokenizer:
            raise InputError(f"{model}: its tokenizer is not the one of {models[0]}")
        weights, meta = load_safetensors(model / MODEL_FILE)
        if total is None:
            total, metadata = {k: v.float() for k, v in weights.items()}, meta
        else:
            for k, v in weights.items():
                total[k] += v.float()
    from safetensors.torch import save

    card = {"averaged_from": [str(m) for m in models],
            "cards": [read_json(m / CARD_FILE) if (m / CARD_FILE).exists() else {} for m in models]}
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    average = {k: (v / len(models)).to(torch.float16).contiguous() for k, v in total.items()}
    write_atomic(staging / MODEL_FILE, save(average, metadata=metadata))
    write_atomic(staging / CONFIG_FILE, (models[0] / CONFIG_FILE).read_text())
    for name, data in zip(TOKENIZER_FILES, tokenizer):
        write_atomic(staging / name, data)
    write_atomic(staging / CARD_FILE, json.dumps(card, indent=2))
    replace_dir(staging, out, stale=(MODEL_FILE, CONFIG_FILE, CARD_FILE, *TOKENIZER_FILES))
    return card


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, help="a model directory (repeat, two or more)")
    parser.add_argument("--out", required=True, help="the averaged model's directory")
    args = parser.parse_args(argv)
    try:
        average_models(args.model, args.out)
    except (InputError, OSError) as e:  # OSError: a tokenizer file that cannot be read
        fail("average_models.py", e)
    print(f"averaged {len(args.model)} models into {args.out}")


if __name__ == "__main__":
    main()
