"""Registers the slm_lm LM kinds in ESPnet right after ESPnet's LM task module is imported.

Installed with slm_lm together with `slm_lm_espnet_hook.pth` in site-packages, whose one line Python's
`site` runs at start-up: `install()` puts a finder on `sys.meta_path` and imports nothing else (not
slm_lm, not ESPnet). When a program imports `espnet2.tasks.lm` (ESPnet's `lm_train`,
`lm_calc_perplexity`, `asr_inference`, `Speech2Text` with an LM), the finder runs that module as usual
and then `slm_lm.espnet_lm.registry.register_kinds()`, so `--lm slm|clm|mlm|bilm|tta` and
`--model slm_lm` work in unmodified ESPnet entry points. Programs that never import it pay nothing.
"""
import importlib.abc
import sys

TARGET = "espnet2.tasks.lm"


class RegisteringLoader(importlib.abc.Loader):
    """ESPnet's own loader for `TARGET`, followed by the registration of the slm_lm kinds."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        from slm_lm.espnet_lm.registry import register_kinds

        register_kinds()

    def __getattr__(self, name):  # get_code, get_source, ... as ESPnet's loader
        return getattr(self.loader, name)


class RegisterKindsFinder(importlib.abc.MetaPathFinder):
    """Finds `TARGET` with the other finders and wraps its loader."""

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
    """Put the finder first on `sys.meta_path` (once)."""
    if not any(isinstance(finder, RegisterKindsFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, RegisterKindsFinder())
