"""Ships `slm_lm_espnet_hook.pth` at the top of site-packages with the package (metadata: setup.cfg).

A regular wheel takes it from the build directory; an editable install (PEP 660) from the unpacked
wheel, which is setuptools' install directory during `editable_wheel`.
"""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "slm_lm_espnet_hook.pth"
# site runs a .pth line that starts with `import`, and prints a traceback if it fails: the hook's own failure (a
# broken slm_lm_espnet_hook.py earlier on the path) is one warning line instead, as the registration's is.
_HOOK = """if os.environ.get("SLM_LM_NO_ESPNET_HOOK", "0") in ("", "0") and "slm_lm_espnet_hook" not in sys.modules:
    try:
        import slm_lm_espnet_hook
        slm_lm_espnet_hook.install()
    except Exception as error:
        sys.modules["slm_lm_espnet_hook"] = None  # tried once: site reads this file twice where lib64 is lib
        problem = " ".join(f"{type(error).__name__}: {error}".split())
        print(f"slm_lm: warning: ESPnet runs without the slm_lm LM kinds ({problem}); "
              "SLM_LM_NO_ESPNET_HOOK=1 turns this registration off", file=sys.stderr)
"""
PTH_LINE = f"import os, sys; exec({_HOOK!r})\n"


class BuildPyWithPth(build_py):
    """build_py that also places the registration hook's .pth where the wheel's top level is built."""

    def run(self):
        super().run()
        top = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        Path(top).mkdir(parents=True, exist_ok=True)
        (Path(top) / PTH).write_text(PTH_LINE)

    def get_outputs(self, include_bytecode=1):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
