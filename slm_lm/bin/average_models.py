"""slm-average-models: average the weights of saved models of one kind and shape (a "model soup"), e.g. runs
continued from the same start with other seeds, or a fine-tuned model and its start: one model that scores at
the cost of one.

  slm-average-models --model exp/pretrain/seed4/slm/model --model exp/pretrain/words280/slm/model \\
      --out exp/pretrain/soup/slm
  slm-average-models --model slm-books --model exp/mwer/slm_clean/model --out exp/mwer/slm_clean_half

A model is a directory or a shipped name (a directory wins). The models must have the same config (kind,
shape) and tokenizer; the first one's config (with its scoring defaults) and tokenizer are kept. Weights are
averaged in float32 and saved in fp16. OUT/training.json records the models as given and their training
cards. OUT is new or an earlier average (a model directory of another command is refused); its files are
written in a temporary directory and moved into place at once.
"""
import argparse
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import read_json
from slm_lm.common.options import Parser
from slm_lm.common.outputs import check_no_overlap, check_output_dir, finish_interrupted, staged_outputs

COMMAND = "slm-average-models"


def _earlier_average(out: Path, names) -> set:
    """`names` when `out` holds an earlier average (its training.json records what it averaged), else none."""
    from slm_lm.model import directory as model_dir

    card = out / model_dir.TRAINING_FILE
    try:
        earlier = card.is_file() and "averaged_from" in read_json(card)
    except (InputError, TypeError):
        earlier = False
    return set(names) if earlier else set()


def average_models(models: list, out) -> dict:
    """Write the average of `models` (directories) to `out`; return its training card."""
    from slm_lm.model import directory as model_dir

    if len(models) < 2:
        raise InputError(f"give at least two models to average, got {len(models)}")
    specs, models, out = [str(m) for m in models], [model_dir.resolve(m) for m in models], Path(out)
    check_no_overlap("--out", out, models)
    names = (model_dir.SAFETENSORS_FILE, model_dir.CONFIG_FILE, model_dir.TRAINING_FILE, *model_dir.TOKENIZER_FILES)
    finish_interrupted(out, COMMAND)
    own = _earlier_average(out, names)
    check_output_dir("--out", out, names, own, COMMAND)  # before the models are read
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
    card = {"averaged_from": specs,
            "cards": [read_json(path) if path.exists() else {} for path in cards]}
    with staged_outputs("--out", out, names, own, COMMAND) as staging:
        model_dir.export(staging, model, tokenizer, options, card)
    return card


def main(argv=None):
    parser = Parser(prog=COMMAND, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True,
                        help="a model directory or shipped name (repeat, two or more)")
    parser.add_argument("--out", required=True, help="the averaged model's directory")
    args = parser.parse_args(argv)
    try:
        average_models(args.model, args.out)
    except (InputError, OSError) as e:  # OSError: an output directory that cannot be written
        fail(COMMAND, e)
    print(f"averaged {len(args.model)} models into {args.out}")


if __name__ == "__main__":
    main()
