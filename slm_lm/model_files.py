"""Reading model files (JSON configs, torch pickles, safetensors) with one-line errors naming the file.

Each reader raises :class:`slm_lm.errors.InputError` for a missing, empty, truncated or garbled file,
text that is not UTF-8, and a pickle that ``torch.load(weights_only=True)`` refuses.
"""
import json
import pickle
import re
import zipfile
from pathlib import Path

import torch

from slm_lm.errors import InputError

KIND_KEY = "slm_lm.kind"  # the LM kind, stored with the weights (safetensors metadata / model.pt entry)


def _first_sentence(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0].split(". ")[0][:200] if text else type(error).__name__


def _check_readable(path) -> None:
    """InputError unless `path` is a readable, non-empty file."""
    try:
        with open(path, "rb") as handle:
            empty = not handle.read(1)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    if empty:
        raise InputError(f"{path}: empty file")


def read_json(path) -> dict:
    """A JSON object from a UTF-8 file (a byte-order mark is accepted)."""
    _check_readable(path)
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 (byte {e.start}: {e.reason})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg}; truncated?)") from None
    if not isinstance(value, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def load_torch(path) -> dict:
    """A state dict saved with ``torch.save``, loaded with ``weights_only=True`` (tensors, no code)."""
    _check_readable(path)
    try:
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

    _check_readable(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        reason = _first_sentence(e)
        raise InputError(f"{path}: not a readable safetensors file, truncated or garbled ({reason})") from None
