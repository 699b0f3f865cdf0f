"""slm-average-models: average the weights of saved models of one kind and shape (a "model soup"), e.g. runs
continued from the same start with other seeds: one model that scores at the cost of one.

  slm-average-models --model exp/pretrain/seed4/slm/model --model exp/pretrain/words280/slm/model \\
      --out exp/pretrain/soup/slm

The models must have the same config (kind, shape) and tokenizer; the first one's config (with its scoring
defaults) and tokenizer are kept. Weights are averaged in float32 and saved in fp16. OUT/training.json
records the models and their training cards; OUT is written in a temporary directory and renamed into place.
"""
import argparse
import tempfile
from pathlib import Path

from slm_lm.errors import InputError, fail
from slm_lm.fileio import read_json, replace_dir


def average_models(models: list, out) -> dict:
    """Write the average of `models` (directories) to `out`; return its training card."""
    from slm_lm import model_dir

    if len(models) < 2:
        raise InputError(f"give at least two models to average, got {len(models)}")
    models, out = [Path(m) for m in models], Path(out)
    if out.resolve() in [m.resolve() for m in models]:
        raise InputError(f"--out {out}: is one of the models to average; choose another directory")
    model, tokenizer, options = model_dir.load_pretrained(models[0])
    first_config = model.config.to_dict()
    total = {k: v.float().clone() for k, v in model.state_dict().items()}
    for directory in models[1:]:
        other, other_tokenizer, _ = model_dir.load_pretrained(directory)
        config = other.config.to_dict()
        if config != first_config:
            differ = sorted(k for k in config if config[k] != first_config[k])
            raise InputError(f"{directory / model_dir.CONFIG_FILE}: not the config of {models[0]} "
                             f"({', '.join(differ)} differ)")
        if other_tokenizer.digest() != tokenizer.digest():
            raise InputError(f"{directory}: its tokenizer is not the one of {models[0]}")
        for k, v in other.state_dict().items():
            total[k] += v.float()
    model.load_state_dict({k: v / len(models) for k, v in total.items()})
    cards = [directory / model_dir.TRAINING_FILE for directory in models]
    card = {"averaged_from": [str(m) for m in models],
            "cards": [read_json(path) if path.exists() else {} for path in cards]}
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    model_dir.export(staging, model, tokenizer, options, card)
    replace_dir(staging, out, stale=(model_dir.SAFETENSORS_FILE, model_dir.CONFIG_FILE, model_dir.TRAINING_FILE,
                                     *model_dir.TOKENIZER_FILES))
    return card


def main(argv=None):
    parser = argparse.ArgumentParser(prog="slm-average-models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, help="a model directory (repeat, two or more)")
    parser.add_argument("--out", required=True, help="the averaged model's directory")
    args = parser.parse_args(argv)
    try:
        average_models(args.model, args.out)
    except (InputError, OSError) as e:  # OSError: an output directory that cannot be written
        fail("slm-average-models", e)
    print(f"averaged {len(args.model)} models into {args.out}")


if __name__ == "__main__":
    main()
