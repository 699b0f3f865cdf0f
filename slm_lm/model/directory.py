"""The model directory: its files, saving and loading it, ESPnet LM experiments, and resolving a model spec.

Our directory holds `config.json` ({"model": LMConfig fields, "scorer": saved scoring options,
"tokenizer_digest": the digest of the tokenizer saved with the model, and "tokenizer": "hf" for a Hugging
Face tokenizer}), the weights (`model.pt`, fp32, written by
`save_pretrained`; or `model.safetensors`, fp16 with the tied head stored once, written by `export`), the
tokenizer's files (`bpe.model` + `tokens.txt`, or a Hugging Face tokenizer with its case option in
`slm_hf_tokenizer.json`) and, for a trained model, its training card `training.json`. The LM kind is
stored with the weights too (`KIND_KEY`).

A spec names a model: a shipped model (`slm_lm.pretrained`), one of our directories or an ESPnet LM
experiment directory (config.yaml + *.pth, read without importing ESPnet); `hf-causal:DIR` / `hf-masked:DIR`
specs are `slm_lm.scoring.hf`'s.

Every reader raises :class:`slm_lm.common.errors.InputError` naming the file for a missing, empty, truncated or
garbled file, text that is not UTF-8, and a pickle that ``torch.load(weights_only=True)`` refuses.
"""
import io
import json
import pickle
import re
import warnings
import zipfile
from pathlib import Path

import torch

from slm_lm import pretrained
from slm_lm.common.errors import InputError
from slm_lm.common.fileio import check_readable, decode_utf8, read_json, read_small_file, why_not, write_atomic
from slm_lm.model.config import KINDS, MASK_KINDS, LMConfig, lm_config
from slm_lm.model.hf_tokenizer import HFTokenizer
from slm_lm.model.kinds import LanguageModel, model_from_config
from slm_lm.model.tokenizer import BPE_MODEL_FILE, MASK, TOKEN_LIST_FILE, Tokenizer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.pt"  # fp32, save_pretrained
SAFETENSORS_FILE = "model.safetensors"  # fp16, export (the shipped models)
TRAINING_FILE = "training.json"  # the training card
TOKENIZER_FILES = (BPE_MODEL_FILE, TOKEN_LIST_FILE)
HF_CASE_FILE = "slm_hf_tokenizer.json"  # the case option of a Hugging Face tokenizer
# config.json's record of the tokenizer the model was saved with (`Tokenizer.digest`), checked at load.
TOKENIZER_DIGEST_KEY = "tokenizer_digest"
KIND_KEY = "slm_lm.kind"  # the LM kind, stored with the weights (safetensors metadata / model.pt entry)
# The tied head projection, stored once in model.safetensors as the token embedding.
TIED_HEAD, TIED_TO = "head.embedding.weight", "embed.tokens.weight"

ESPNET_CONFIG = "config.yaml"
# Preferred weights of an ESPnet experiment, best first: the n-best average, the best epoch, the last epoch.
ESPNET_CHECKPOINTS = ("valid.loss.ave.pth", "valid.loss.best.pth", "latest.pth")
# ESPnet checkpoints hold our LanguageModel as ESPnetLanguageModel.lm (SlmLMForESPnet) .model.
ESPNET_WRAPPER, ESPNET_MODEL, ESPNET_MODEL_ALIAS = "lm.", "model.", "backbone."  # lm.backbone.* loads as lm.model.*
ESPNET_PREFIX = ESPNET_WRAPPER + ESPNET_MODEL
# Tensors tied to the vocabulary (the tied embedding/head pair and the output bias).
VOCAB_TENSORS = (TIED_TO, TIED_HEAD, "head.bias")


# --- readers ---------------------------------------------------------------------------------------------

def _first_sentence(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0].split(". ")[0][:200] if text else type(error).__name__


def load_torch(path) -> dict:
    """A state dict saved with ``torch.save``, loaded with ``weights_only=True`` (tensors, no code)."""
    check_readable(path)
    try:
        with warnings.catch_warnings():
            # A plain pickle (not torch's zip format) draws torch's warning about its pickle protocol before
            # the refusal below: the refusal is the one message.
            warnings.filterwarnings("ignore", message=r"Detected pickle protocol", category=UserWarning)
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        what = f" ({found.group(1)})" if found else ""
        raise InputError(f"{path}: refused to unpickle objects other than tensors{what} (torch.load weights_only); "
                         "re-save it with torch.save(model.state_dict())") from None
    except (EOFError, RuntimeError, OSError, zipfile.BadZipFile, ValueError) as e:
        reason = _first_sentence(e)
        raise InputError(f"{path}: not a readable torch weights file, truncated or garbled ({reason})") from None
    if not isinstance(state, dict):
        raise InputError(f"{path}: expected a state dict, got {type(state).__name__}")
    return state


def load_safetensors(path) -> tuple[dict, dict]:
    """(tensors, metadata) of a safetensors file."""
    from safetensors import SafetensorError, safe_open

    check_readable(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        reason = _first_sentence(e)
        raise InputError(f"{path}: not a readable safetensors file, truncated or garbled ({reason})") from None


# --- our directories -------------------------------------------------------------------------------------

def save_tokenizer(tokenizer, directory) -> None:
    """Write the tokenizer's files into `directory` (a Hugging Face tokenizer with its case option)."""
    tokenizer.save(directory)
    if isinstance(tokenizer, HFTokenizer):
        write_atomic(Path(directory) / HF_CASE_FILE, json.dumps({"case": tokenizer.case}))


def _tokenizer_files(tokenizer) -> tuple:
    """The names of the files that hold `tokenizer` in a model directory."""
    return ("the Hugging Face tokenizer files", HF_CASE_FILE) if isinstance(tokenizer, HFTokenizer) else TOKENIZER_FILES


def load_tokenizer(directory, hf: bool = False):
    """The tokenizer saved in `directory` by `save_tokenizer` (`hf`: a Hugging Face one)."""
    directory = Path(directory)
    if not hf:
        return Tokenizer.from_dir(directory)
    saved = directory / HF_CASE_FILE
    case = read_json(saved).get("case", "as-is") if saved.exists() else "as-is"
    return HFTokenizer.from_dir(directory, case=case)


def _write_config(directory: Path, model: LanguageModel, tokenizer, scorer_options: dict) -> None:
    config = {"model": model.config.to_dict(), "scorer": dict(scorer_options),
              TOKENIZER_DIGEST_KEY: tokenizer.digest()}
    if isinstance(tokenizer, HFTokenizer):
        config["tokenizer"] = "hf"
    write_atomic(directory / CONFIG_FILE, json.dumps(config, indent=2))


def torch_bytes(obj) -> bytes:
    """`obj` as `torch.save` writes it, made in memory: a file that cannot be written (a full disk) is then an
    OSError naming it, not torch's RuntimeError about its half-written archive."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def save_pretrained(directory, model: LanguageModel, tokenizer, scorer_options: dict) -> None:
    """Write config.json (with the scoring options `scorer_options`), model.pt (fp32) and the tokenizer files
    to `directory` (atomic per file)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(directory / WEIGHTS_FILE, torch_bytes({**model.state_dict(), KIND_KEY: model.config.kind}))
    save_tokenizer(tokenizer, directory)
    _write_config(directory, model, tokenizer, scorer_options)


def export(directory, model: LanguageModel, tokenizer, scorer_options: dict, card: dict | None = None) -> None:
    """Write a scoring-ready directory: fp16 model.safetensors (the tied head stored once), config.json with
    `scorer_options`, the tokenizer files and, with `card`, training.json (each file atomic;
    `pretrain.trainer.install_model` replaces the directory as a whole)."""
    from safetensors.torch import save

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in model.state_dict().items()
             if k != TIED_HEAD}
    write_atomic(directory / SAFETENSORS_FILE, save(state, metadata={KIND_KEY: model.config.kind}))
    save_tokenizer(tokenizer, directory)
    _write_config(directory, model, tokenizer, scorer_options)
    if card is not None:
        write_atomic(directory / TRAINING_FILE, json.dumps(card, indent=2))


def load_pretrained(directory) -> tuple:
    """(model in eval mode, tokenizer, saved scorer options) of a directory written by `save_pretrained` or
    `export`.

    Every problem (missing, empty, truncated or garbled file, unknown config key, weights of another
    shape or kind than config.json declares, tokenizer of another vocabulary, or another tokenizer than the
    one config.json records) raises InputError. A config.json without a tokenizer record loads without that
    check.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory}: {why_not(directory, 'model directory')}")
    weights = directory / SAFETENSORS_FILE
    if not weights.exists():
        weights = directory / WEIGHTS_FILE
    config_path = directory / CONFIG_FILE
    for path in (config_path, weights):
        if not path.exists():
            raise InputError(f"{directory}: missing {path.name} (not a save_pretrained directory)")
    config = read_json(config_path)
    if not isinstance(config.get("model"), dict):
        raise InputError(f"{config_path}: no 'model' section (not a save_pretrained config)")
    recorded = config.get(TOKENIZER_DIGEST_KEY)
    if recorded is not None and not (isinstance(recorded, str) and re.fullmatch(r"[0-9a-f]{16}", recorded)):
        raise InputError(f"{config_path}: {TOKENIZER_DIGEST_KEY} must be 16 hex digits, got {str(recorded)[:40]!r}")
    try:
        model = model_from_config(LMConfig.from_dict(config["model"]))
    except (TypeError, ValueError) as e:
        raise InputError(f"{config_path}: bad model config: {e}") from None
    if weights.name == SAFETENSORS_FILE:
        state, metadata = load_safetensors(weights)
        state = {k: v.float() for k, v in state.items()}
        if TIED_TO in state:
            state.setdefault(TIED_HEAD, state[TIED_TO])
        saved_kind = metadata.get(KIND_KEY)
    else:
        state = load_torch(weights)
        saved_kind = state.pop(KIND_KEY, None)
    kind = model.config.kind
    if saved_kind is not None and saved_kind != kind:
        raise InputError(f"{config_path}: declares kind {kind!r} but {weights.name} holds a {saved_kind!r} model")
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        reason = " ".join(str(e).split())[:300]
        raise InputError(f"{weights}: weights do not match {config_path.name} (kind {kind!r}, vocab_size "
                         f"{model.config.vocab_size}): {reason}") from None
    tokenizer = load_tokenizer(directory, hf=config.get("tokenizer") == "hf")
    if tokenizer.vocab_size != model.config.vocab_size:
        raise InputError(f"{directory}: the tokenizer has {tokenizer.vocab_size} tokens but {CONFIG_FILE} "
                         f"declares vocab_size {model.config.vocab_size}; the files do not belong together")
    if recorded is not None and tokenizer.digest() != recorded:
        files = ", ".join(_tokenizer_files(tokenizer))
        raise InputError(f"{directory}: the tokenizer ({files}) is not the one this model was saved with "
                         f"(digest {tokenizer.digest()}, {CONFIG_FILE} records {recorded}); the files do not "
                         "belong together")
    return model.eval(), tokenizer, config.get("scorer", {})


# --- ESPnet LM experiments -------------------------------------------------------------------------------

def rename_espnet_model_alias(state: dict, prefix: str) -> None:
    """Rename, in place, the keys `prefix`backbone.* of a checkpoint to `prefix`model.* (SlmLMForESPnet's model
    attribute), so that checkpoints naming it either way load."""
    alias = prefix + ESPNET_MODEL_ALIAS
    for key in [k for k in state if k.startswith(alias)]:
        state[prefix + ESPNET_MODEL + key[len(alias):]] = state.pop(key)


def find_checkpoint(exp_dir: Path) -> Path:
    """The first of `ESPNET_CHECKPOINTS` present in `exp_dir`."""
    for name in ESPNET_CHECKPOINTS:
        if (exp_dir / name).exists():
            return exp_dir / name
    raise InputError(f"{exp_dir}: no trained weights (looked for {', '.join(ESPNET_CHECKPOINTS)})")


def resolve_bpemodel(bpemodel: str, exp_dir: Path) -> Path:
    """ESPnet stores the path as given at training time: try it as is, then from the dirs above exp_dir."""
    path = Path(bpemodel)
    candidates = [path] if path.is_absolute() else [path, *(parent / path for parent in exp_dir.resolve().parents)]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise InputError(f"{exp_dir / ESPNET_CONFIG}: bpemodel {bpemodel} not found (also looked above {exp_dir})")


def load_espnet_weights(model: LanguageModel, path: Path) -> None:
    """Load ESPnet-saved model weights (`lm.model.*` keys; `lm.backbone.*` keys load as those) into `model`."""
    state = load_torch(path)
    rename_espnet_model_alias(state, ESPNET_WRAPPER)
    ours = {k[len(ESPNET_PREFIX):]: v for k, v in state.items() if k.startswith(ESPNET_PREFIX)}
    if len(ours) != len(state):
        other = sorted(k for k in state if not k.startswith(ESPNET_PREFIX))[:3]
        raise InputError(f"{path}: parameters outside {ESPNET_PREFIX}* ({other} ...): not an slm_lm ESPnet model")
    try:
        model.load_state_dict(ours)
    except RuntimeError as e:
        raise InputError(f"{path}: weights do not match config.yaml's lm_conf: {e}") from None


def read_espnet_config(path) -> dict:
    """An ESPnet config.yaml as a mapping (a regular UTF-8 file of bounded size; no Python tags), whose
    `lm_conf`, if any, is a mapping and whose `token_list`, if a list, holds strings; else InputError."""
    import yaml

    try:
        config = yaml.safe_load(decode_utf8(path, read_small_file(path, "ESPnet config")))
    except yaml.YAMLError as e:
        raise InputError(f"{path}: cannot read the ESPnet config: {e}") from None
    if not isinstance(config, dict):
        raise InputError(f"{path}: not an ESPnet config (expected a YAML mapping)")
    if not isinstance(config.get("lm_conf") or {}, dict):
        raise InputError(f"{path}: lm_conf is {config['lm_conf']!r}, not a mapping of the LM's options")
    tokens = config.get("token_list")
    if isinstance(tokens, list):
        bad = next((i for i, t in enumerate(tokens) if not isinstance(t, str)), None)
        if bad is not None:
            raise InputError(f"{path}: token_list[{bad}] is {tokens[bad]!r}, not a string (quote it in the YAML)")
    return config


def load_espnet_experiment(exp_dir, checkpoint=None) -> tuple:
    """(model in eval mode, Tokenizer) from an ESPnet LM experiment trained with `--lm slm|clm|mlm|bilm|tta`.

    `checkpoint` is a .pth file name in `exp_dir` (or a path); by default the first of `ESPNET_CHECKPOINTS`.
    """
    exp_dir = Path(exp_dir)
    config_path = exp_dir / ESPNET_CONFIG
    config = read_espnet_config(config_path)
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
    model = model_from_config(lm_config(kind, len(token_list), config.get("lm_conf") or {}, str(config_path)))
    load_espnet_weights(model, find_checkpoint(exp_dir) if checkpoint is None else exp_dir / checkpoint)
    tokenizer = Tokenizer(resolve_bpemodel(config["bpemodel"], exp_dir), token_list)
    return model.eval(), tokenizer


def save_espnet_init(out, model: LanguageModel, tokenizer=None) -> list:
    """Write OUT/lm.pth (`lm.model.*` keys, for ESPnet's `--init_param`) and OUT/lm_conf.yaml (the `lm_conf`
    whose shapes match). With `tokenizer`, also its files (ESPnet's --token_list and --bpemodel); without,
    the vocabulary tensors are left out (ESPnet trains them on its own token list). Returns those left out."""
    import yaml

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = model.state_dict()
    left_out = [] if tokenizer is not None else [k for k in VOCAB_TENSORS if k in state]
    weights = {ESPNET_PREFIX + k: v for k, v in state.items() if k not in left_out}
    if tokenizer is not None:
        tokenizer.save(out)
    conf = model.config.to_dict()
    for key in ("kind", "vocab_size", "mask_id"):  # ESPnet's token list sets these
        conf.pop(key)
    write_atomic(out / "lm.pth", torch_bytes(weights))
    write_atomic(out / "lm_conf.yaml", yaml.safe_dump({"lm_conf": conf}, sort_keys=False))
    return left_out


# --- specs -----------------------------------------------------------------------------------------------

def resolve(spec) -> Path:
    """The directory a spec names: a directory, else a shipped model of that name (a directory wins)."""
    directory = Path(spec)
    if not directory.exists() and pretrained.path(str(spec)) is not None:
        directory = pretrained.path(str(spec))
    if not directory.is_dir():
        known = ", ".join(pretrained.names()) or "none"
        raise InputError(f"{directory}: {why_not(directory, 'model directory')} (shipped models: {known})")
    return directory


def load_model(spec) -> tuple:
    """(model in eval mode, tokenizer, saved scorer options) of a shipped name, one of our directories or an
    ESPnet LM experiment directory."""
    directory = resolve(spec)
    if (directory / ESPNET_CONFIG).exists() and not (directory / CONFIG_FILE).exists():
        return (*load_espnet_experiment(directory), {})
    return load_pretrained(directory)
