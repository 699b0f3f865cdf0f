"""Registration of the slm_lm LM kinds in ESPnet's LM task, done explicitly, never on import.

ESPnet builds LMs by name from two `ClassChoices` tables (`espnet2.tasks.lm.lm_choices` for `--lm`,
`model_choices` for `--model`); extending them is its way of adding LM classes. `register_kinds()`
adds `--lm slm|clm|mlm|bilm|tta` and `--model slm_lm`. Every slm_lm entry point that hands over to ESPnet
calls it first (`slm_lm.bin.lm_train`, `slm_lm.bin.lm_calc_perplexity`, `slm_lm.bin.asr_inference`,
`SlmLMTask.get_parser`). In an environment where slm_lm is installed, the registration hook
(`slm_lm_espnet_hook`, run through `slm_lm_espnet_hook.pth`) also calls it right after anything imports
`espnet2.tasks.lm`, so ESPnet's own entry points (`python -m espnet2.bin.lm_train`, `lm_calc_perplexity`,
`asr_inference`, as asr.sh runs them) and `Speech2Text` know the kinds. Importing slm_lm registers nothing,
and importing this module does not import ESPnet's LM task.

ESPnet's `LMTask.build_model` builds an LM from the token list as it is, and asr.sh's list has no `<mask>`:
registration therefore also wraps that classmethod so that, for the kinds that use `<mask>` (slm, mlm,
tta), it first inserts `<mask>` before `<sos/eos>` exactly as `SlmLMTask` (`python -m slm_lm.bin.lm_train`)
does (`checks.kind_token_list`). ESPnet builds the model before it writes config.yaml and before it builds
the text preprocessor, so both take the list with `<mask>`: the pieces keep their ids, `<sos/eos>` moves
one up, and the experiment is the one our own entry point would train. An `lm_conf` `mask_id` that points
at another token is refused (`checks.check_mask_token`). ESPnet's own kinds pass straight through. For the slm_lm
kinds, ESPnet's default `--model lm` (a config without `model:`; its objective is a causal LM's) builds
`--model slm_lm`, as `SlmLMTask` does.
"""
import argparse
import sys
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.espnet_lm.checks import check_mask_token, config_source, kind_token_list
from slm_lm.espnet_lm.espnet_model import SlmESPnetLanguageModel
from slm_lm.espnet_lm.lm import LM_CLASSES
from slm_lm.model.config import lm_config

MODEL_NAME = "slm_lm"


def register_kinds() -> None:
    """Add the slm_lm kinds to ESPnet's `--lm` choices and `SlmESPnetLanguageModel` as `--model slm_lm`.

    Also wraps `LMTask.build_model` so that the kinds that use `<mask>` get it (`check_build_model`). Idempotent. A name
    ESPnet already uses for another class raises `RuntimeError` (no silent override).
    """
    # Imported here, not at the top: importing this module must not import ESPnet's LM task, whose
    # registration hook imports this module (any import order of slm_lm's and ESPnet's modules works).
    from espnet2.tasks.lm import LMTask, lm_choices, model_choices

    for table, entries in ((lm_choices, LM_CLASSES), (model_choices, {MODEL_NAME: SlmESPnetLanguageModel})):
        for name, cls in entries.items():
            present = table.classes.setdefault(name, cls)
            if present is not cls:
                raise RuntimeError(f"ESPnet's --{table.name} {name} is already {present.__module__}."
                                   f"{present.__qualname__}; cannot register slm_lm's {cls.__qualname__}")
    build_model = LMTask.__dict__["build_model"].__func__
    if not getattr(build_model, "checks_mask_token", False):
        LMTask.build_model = classmethod(check_build_model(build_model))


def check_build_model(build_model):
    """ESPnet's `LMTask.build_model`, for the slm_lm kinds after the token list is made the one they train with
    (`<mask>` before `<sos/eos>` for slm, mlm and tta, as `SlmLMTask` does) and checked, and with ESPnet's
    default `--model lm` (a config without `model:`) taken as `--model slm_lm`, as `SlmLMTask` takes it."""

    def checked_build_model(cls, args: argparse.Namespace):
        if getattr(args, "lm", None) in LM_CLASSES:
            if getattr(args, "model", "lm") == "lm":  # ESPnet's default, whose objective is not the kinds' own
                args.model = MODEL_NAME
            try:
                args.token_list = kind_token_list(args.lm, args.token_list)  # a list, as ESPnet itself stores it
                check_mask_token(args.lm, args.token_list, getattr(args, "lm_conf", None), config_source(args))
                lm_config(args.lm, len(args.token_list), getattr(args, "lm_conf", None) or {}, config_source(args))
            except InputError as e:
                if getattr(cls, "reports_input_errors", False):  # slm-lm-train reports them itself
                    raise
                fail(Path(sys.argv[0]).name or "lm_train", e)  # stock ESPnet: one line, exit 2
        return build_model(cls, args)

    checked_build_model.checks_mask_token = True
    checked_build_model.__wrapped__ = build_model
    checked_build_model.__doc__ = build_model.__doc__
    checked_build_model.__qualname__ = build_model.__qualname__
    return checked_build_model
