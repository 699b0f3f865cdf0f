"""slm_lm: sentence scoring with a Sliding Language Model (Transcormer) and same-backbone baselines.

`build_lm`, `LMConfig` and `Scorer` are imported lazily so that text tools do not pay for torch.
"""
__version__ = "0.1.0"
__all__ = ["LMConfig", "Scorer", "build_lm", "load_scorer"]

_LAZY = {"LMConfig": "slm_lm.model.config", "build_lm": "slm_lm.model.kinds", "Scorer": "slm_lm.scoring.scorer",
         "load_scorer": "slm_lm.scoring.scorer"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'slm_lm' has no attribute {name!r}")
