"""Load a trained ESPnet LM experiment directory (config.yaml + *.pth) as an slm_lm model and tokenizer.

Reads only the YAML and the state dict, so it does not import ESPnet.
"""
from pathlib import Path

import yaml

from slm_lm.config import KINDS
from slm_lm.errors import InputError
from slm_lm.espnet_lm.checks import MASK_KINDS, lm_config
from slm_lm.model_files import load_torch
from slm_lm.models import LanguageModel, model_from_config
from slm_lm.tokenizer import MASK, Tokenizer

# Preferred weights, best first: ESPnet's n-best average, the best epoch, the last epoch.
CHECKPOINTS = ("valid.loss.ave.pth", "valid.loss.best.pth", "latest.pth")
PREFIX = "lm.backbone."


def find_checkpoint(exp_dir: Path) -> Path:
    """The first of `CHECKPOINTS` present in `exp_dir`."""
    for name in CHECKPOINTS:
        if (exp_dir / name).exists():
            return exp_dir / name
    raise InputError(f"{exp_dir}: no trained weights (looked for {', '.join(CHECKPOINTS)})")


def resolve_bpemodel(bpemodel: str, exp_dir: Path) -> Path:
    """ESPnet stores the path as given at training time: try it as is, then from the dirs above exp_dir."""
    path = Path(bpemodel)
    candidates = [path] if path.is_absolute() else [path, *(parent / path for parent in exp_dir.resolve().parents)]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise InputError(f"{exp_dir / 'config.yaml'}: bpemodel {bpemodel} not found (also looked above {exp_dir})")


def load_espnet_experiment(exp_dir, checkpoint=None):
    """(model in eval mode, Tokenizer) from an ESPnet LM experiment trained with `--lm slm|clm|mlm|bilm|tta`.

    `checkpoint` is a .pth file name in `exp_dir` (or a path); by default the first of `CHECKPOINTS`.
    """
    exp_dir = Path(exp_dir)
    config_path = exp_dir / "config.yaml"
    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InputError(f"{config_path}: cannot read the ESPnet config: {e}") from None
    if not isinstance(config, dict):
        raise InputError(f"{config_path}: not an ESPnet config (expected a YAML mapping)")
    kind = config.get("lm")
    if kind not in KINDS:
        raise InputError(f"{config_path}: lm is {kind!r}, not an slm_lm kind {KINDS}")
    token_list = config.get("token_list")
    if not isinstance(token_list, list):
        raise InputError(f"{config_path}: token_list is not stored as a list of tokens")
    if kind in MASK_KINDS and token_list[-2:-1] != [MASK]:
        raise InputError(f"{config_path}: token_list has no {MASK} before <sos/eos>; the {kind} kind needs it")
    if not config.get("bpemodel"):
        raise InputError(f"{config_path}: no bpemodel (slm_lm LMs are trained with --token_type bpe)")
    cfg = lm_config(kind, len(token_list), config.get("lm_conf") or {}, str(config_path))
    model = model_from_config(cfg)
    weights = find_checkpoint(exp_dir) if checkpoint is None else exp_dir / checkpoint
    load_weights(model, weights)
    tokenizer = Tokenizer(resolve_bpemodel(config["bpemodel"], exp_dir), token_list)
    return model.eval(), tokenizer


def load_weights(model: LanguageModel, path: Path) -> None:
    """Load ESPnet-saved model weights (`lm.backbone.*` keys) into `model`."""
    state = load_torch(path)
    backbone = {k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)}
    if len(backbone) != len(state):
        other = sorted(k for k in state if not k.startswith(PREFIX))[:3]
        raise InputError(f"{path}: parameters outside {PREFIX}* ({other} ...): not an slm_lm ESPnet model")
    try:
        model.load_state_dict(backbone)
    except RuntimeError as e:
        raise InputError(f"{path}: weights do not match config.yaml's lm_conf: {e}") from None
