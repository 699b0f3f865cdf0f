"""`SlmLMTask`: ESPnet's `LMTask` with the slm_lm kinds registered as `--lm slm|clm|mlm|bilm|tta`.

Everything else (token-count batching, optimiser and scheduler from the config, AMP, `--ngpu` with
`--multiprocessing_distributed true` (DDP) and multi-node DDP through ESPnet's launcher, `--resume`,
n-best checkpoint averaging) is ESPnet's own. Before training, the inputs are checked so that bad ones
fail at once with an `InputError` naming the file and line (token list, `lm_conf`/`optim_conf`/
`scheduler_conf`, text and shape files). The model is built by ESPnet's `LMTask.build_model` from
`--lm <kind> --model slm_lm`, which config.yaml records, so ESPnet's own tools rebuild it once the
kinds are registered (`slm_lm.espnet_lm.registry`).
"""
import argparse

import torch
from espnet2.tasks.abs_task import optim_classes, scheduler_classes
from espnet2.tasks.lm import LMTask
from typeguard import TypeCheckError

from slm_lm.model.config import lm_config
from slm_lm.common.errors import InputError
from slm_lm.common.outputs import check_no_overlap, check_output_dir
from slm_lm.espnet_lm.checks import BOUNDARY_TOKENS, check_data, config_source, kind_token_list
from slm_lm.espnet_lm.espnet_model import AUTOCAST_DTYPES
from slm_lm.espnet_lm.lm import LM_CLASSES
from slm_lm.espnet_lm.registry import MODEL_NAME, register_kinds

POSITIVE_OPTIONS = ("max_epoch", "batch_size", "batch_bins", "accum_grad", "num_iters_per_epoch")


def check_output_dir_of(args: argparse.Namespace) -> None:
    """`--output_dir` by the shared output rules (`slm_lm.common.outputs`): a directory that can be written, and
    neither is, lies inside nor contains an input (token list, BPE model, config, data and shape files)."""
    data = [*(getattr(args, "train_data_path_and_name_and_type", None) or []),
            *(getattr(args, "valid_data_path_and_name_and_type", None) or [])]
    inputs = [args.token_list if isinstance(args.token_list, str) else None, getattr(args, "bpemodel", None),
              getattr(args, "config", None), *(entry[0] for entry in data),
              *(getattr(args, "train_shape_file", None) or []), *(getattr(args, "valid_shape_file", None) or [])]
    check_output_dir("--output_dir", args.output_dir, (), (), "slm-lm-train")
    check_no_overlap("--output_dir", args.output_dir, [path for path in inputs if path])


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
    """ESPnet LM task whose `--lm slm|clm|mlm|bilm|tta` train the slm_lm models with their own objective.

    Registers the kinds itself where ESPnet starts (parser, model building), including in the processes
    ESPnet spawns per GPU, which build the model without parsing a command line.
    """

    reports_input_errors = True  # its entry point (slm-lm-train) reports InputError in one line

    @classmethod
    def get_parser(cls):
        register_kinds()
        return super().get_parser()

    @classmethod
    def build_model(cls, args: argparse.Namespace):
        """`SlmESPnetLanguageModel` for the slm_lm kinds (checked first); ESPnet's own LMs as ESPnet does."""
        register_kinds()
        if args.lm in LM_CLASSES:
            # Saved in config.yaml as a list, as ESPnet does, so the experiment is self-contained.
            args.token_list = kind_token_list(args.lm, args.token_list)
            source = config_source(args)
            unknown = sorted(set(args.model_conf) - {"autocast"})
            if unknown:
                raise InputError(f"{source}: model_conf {unknown} not used by slm_lm LMs (only autocast); remove it")
            if args.model_conf.get("autocast", "float32") not in AUTOCAST_DTYPES:
                raise InputError(f"{source}: model_conf: autocast {args.model_conf['autocast']!r} is not one of "
                                 f"{sorted(AUTOCAST_DTYPES)}")
            if args.model not in ("lm", MODEL_NAME):  # "lm" is ESPnet's default
                raise InputError(f"{source}: model {args.model!r}: slm_lm LMs train as model {MODEL_NAME}")
            args.model = MODEL_NAME
            lm_config(args.lm, len(args.token_list), args.lm_conf, source)
        return super().build_model(args)

    @classmethod
    def main_worker(cls, args: argparse.Namespace):
        """Check the inputs, then train (or collect stats) as ESPnet does."""
        if args.lm in LM_CLASSES:
            tokens = kind_token_list(args.lm, args.token_list)
            config = lm_config(args.lm, len(tokens), args.lm_conf, config_source(args))
            check_options(args)
            check_output_dir_of(args)
            check_data(args, config.max_positions - BOUNDARY_TOKENS)
        super().main_worker(args)
