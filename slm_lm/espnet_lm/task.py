"""`SlmLMTask`: ESPnet's `LMTask` with the slm_lm kinds registered as `--lm slm|clm|mlm|bilm|tta`.

Everything else (token-count batching, optimiser and scheduler from the config, AMP, `--ngpu` and
multi-node DDP through ESPnet's launcher, `--resume`, n-best checkpoint averaging) is ESPnet's own.
Before training, the inputs are checked so that bad ones fail at once with an `InputError` naming the
file and line (token list, `lm_conf`/`optim_conf`/`scheduler_conf`, text and shape files).
"""
import argparse

import torch
from espnet2.tasks.abs_task import optim_classes, scheduler_classes
from espnet2.tasks.lm import LMTask, lm_choices
from espnet2.torch_utils.initialize import initialize
from typeguard import TypeCheckError

from slm_lm.errors import InputError
from slm_lm.espnet_lm.checks import BOUNDARY_TOKENS, check_data, config_source, lm_config, read_token_list
from slm_lm.espnet_lm.espnet_model import SlmESPnetLanguageModel
from slm_lm.espnet_lm.lm import LM_CLASSES

lm_choices.classes.update(LM_CLASSES)

POSITIVE_OPTIONS = ("max_epoch", "batch_size", "batch_bins", "accum_grad", "num_iters_per_epoch")


def check_options(args: argparse.Namespace) -> None:
    """Trainer numbers must be positive; the optimiser and scheduler must accept their configs."""
    source = config_source(args)
    for name in POSITIVE_OPTIONS:
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            raise InputError(f"{source}: {name} must be positive, got {value}")
    probe = [torch.nn.Parameter(torch.zeros(1))]
    optim_class = optim_classes.get(args.optim)
    if optim_class is None:
        raise InputError(f"{source}: optim {args.optim!r} is not one of {sorted(optim_classes)}")
    try:
        optimizer = optim_class(probe, **args.optim_conf)
    except (ValueError, TypeError) as e:
        raise InputError(f"{source}: optim_conf: {e}") from None
    if args.scheduler is not None:
        scheduler_class = scheduler_classes.get(args.scheduler)
        if scheduler_class is None:
            raise InputError(f"{source}: scheduler {args.scheduler!r} is not one of {sorted(scheduler_classes)}")
        try:
            scheduler_class(optimizer, **args.scheduler_conf)
        except (ValueError, TypeError, TypeCheckError) as e:  # ESPnet schedulers are typeguard-checked
            raise InputError(f"{source}: scheduler_conf: {e}") from None


class SlmLMTask(LMTask):
    """ESPnet LM task whose `--lm slm|clm|mlm|bilm|tta` train the slm_lm models with their own objective."""

    @classmethod
    def build_model(cls, args: argparse.Namespace):
        """`SlmESPnetLanguageModel` for the slm_lm kinds; ESPnet's own LMs are built as ESPnet does."""
        if args.lm not in LM_CLASSES:
            return super().build_model(args)
        token_list = read_token_list(args.token_list)
        # Saved in config.yaml as a list, as ESPnet does, so the experiment is self-contained.
        args.token_list = token_list.copy()
        if args.model_conf:
            raise InputError(f"{config_source(args)}: model_conf {args.model_conf} is not used by slm_lm LMs; remove it")
        lm_config(args.lm, len(token_list), args.lm_conf, config_source(args))
        model = SlmESPnetLanguageModel(LM_CLASSES[args.lm](vocab_size=len(token_list), **args.lm_conf), len(token_list))
        if args.init is not None:
            initialize(model, args.init)
        return model

    @classmethod
    def main_worker(cls, args: argparse.Namespace):
        """Check the inputs, then train (or collect stats) as ESPnet does."""
        if args.lm in LM_CLASSES:
            tokens = read_token_list(args.token_list)
            config = lm_config(args.lm, len(tokens), args.lm_conf, config_source(args))
            check_options(args)
            check_data(args, config.max_positions - BOUNDARY_TOKENS)
        super().main_worker(args)
