"""slm_lm: sentence scoring with a Sliding Language Model (Transcormer) and same-backbone baselines."""
from slm_lm.config import LMConfig
from slm_lm.models import build_lm

__all__ = ["LMConfig", "build_lm"]
__version__ = "0.1.0"
