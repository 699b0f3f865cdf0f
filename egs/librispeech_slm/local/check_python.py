"""Exit 0 when this Python has the packages the recipe imports (ESPnet and slm_lm's dependencies), else
say which are missing and exit 1. Looks them up without importing them (a fraction of a second)."""
import importlib.util
import sys

MODULES = ("espnet2", "torch", "torchaudio", "sentencepiece", "safetensors", "jiwer", "kaldiio", "soundfile",
           "yaml", "tqdm", "numpy", "matplotlib")

missing = [name for name in MODULES if importlib.util.find_spec(name) is None]
if missing:
    print(f"{sys.executable} lacks {' '.join(missing)} (pip install 'slm_lm[espnet]' there, or leave --python "
          "unset to use the repository's .venv)", file=sys.stderr)
    sys.exit(1)
