"""Registers the slm_lm LM kinds in ESPnet right after ESPnet's LM task module is imported.

Installed with slm_lm together with `slm_lm_espnet_hook.pth` in site-packages, whose one line Python's
`site` runs at start-up: `install()` puts a finder on `sys.meta_path` and imports nothing (no importlib.abc,
not slm_lm, not ESPnet: `sys` and `os` are already loaded by `site`), so a start-up pays well under a
millisecond (local/benchmarks/bench_hook_startup.py). When a program imports `espnet2.tasks.lm` (ESPnet's
`lm_train`, `lm_calc_perplexity`, `asr_inference`, `Speech2Text` with an LM), the finder runs that module
as usual and then `slm_lm.espnet_lm.registry.register_kinds()`, so `--lm slm|clm|mlm|bilm|tta` and
`--model slm_lm` work in unmodified ESPnet entry points.

The registration never makes ESPnet fail: if it cannot happen (an slm_lm that is broken or partly
installed), ESPnet goes on as without slm_lm and one warning line on stderr names the problem.
`SLM_LM_NO_ESPNET_HOOK=1` in the environment of a Python start turns the hook off for that process.
"""
import os
import sys

TARGET = "espnet2.tasks.lm"
OPT_OUT = "SLM_LM_NO_ESPNET_HOOK"


class RegisteringLoader:
    """ESPnet's own loader for `TARGET`, followed by the registration of the slm_lm kinds."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        try:
            from slm_lm.espnet_lm.registry import register_kinds

            register_kinds()
        except Exception as error:  # noqa: BLE001 (ESPnet must work whatever slm_lm's state)
            problem = " ".join(f"{type(error).__name__}: {error}".split())
            print(f"slm_lm: warning: ESPnet runs without the slm_lm LM kinds ({problem}); "
                  f"{OPT_OUT}=1 turns this registration off", file=sys.stderr)

    def __getattr__(self, name):  # get_code, get_source, ... as ESPnet's loader
        if name == "loader":  # not set yet (no recursion)
            raise AttributeError(name)
        return getattr(self.loader, name)


class RegisterKindsFinder:
    """Finds `TARGET` with the other finders on `sys.meta_path` and wraps its loader."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET:
            return None
        for finder in [f for f in sys.meta_path if f is not self]:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                spec.loader = RegisteringLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Put the finder first on `sys.meta_path` (once), unless `SLM_LM_NO_ESPNET_HOOK` is set (other than 0)."""
    if os.environ.get(OPT_OUT, "0") not in ("", "0"):
        return
    if not any(isinstance(finder, RegisterKindsFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, RegisterKindsFinder())
