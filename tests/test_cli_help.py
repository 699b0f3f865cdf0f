"""Every command the package installs answers --help, and every command and script the docs name exists."""
import configparser
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "RESULTS.md", REPO / "BENCHMARKS.md", *sorted((REPO / "docs").glob("*.md")),
        REPO / "egs" / "librispeech_slm" / "README.md"]
HISTORY = REPO / "docs" / "experiments.md"  # the record keeps the commands as they were run


def console_scripts() -> dict:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    lines = config["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict(tuple(part.strip() for part in line.split("=")) for line in lines)


# Commands that need torch to build their options: ESPnet's trainer, and those whose options name a model's parts
NEED_TORCH_FOR_OPTIONS = {"slm-lm-train", "slm-model-card", "slm-am-scores", "slm-mwer-train"}


@pytest.mark.parametrize("command,target", sorted(console_scripts().items()))
def test_every_installed_command_answers_help_without_torch(command, target, tmp_path):
    """--help is answered (exit 0, usage) before torch is imported (about 2 s of a start): torch comes with the
    first model or tensor. The commands that need it for their options are listed, and no other."""
    module = target.split(":")[0]
    code = ("import runpy, sys\n"
            "sys.argv = sys.argv[1:]\n"
            "try:\n    runpy.run_module(sys.argv[0], run_name='__main__')\n"
            "except SystemExit as e:\n    print('exit', e.code, file=sys.stderr)\n"
            "print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, module, "--help"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    imported = "torch imported: True" in proc.stderr
    assert "usage:" in proc.stdout.lower() and "exit 0" in proc.stderr, proc.stderr
    assert imported == (command in NEED_TORCH_FOR_OPTIONS), proc.stderr


def cited(pattern: str) -> set:
    found = set()
    for doc in DOCS:
        if doc != HISTORY:
            found |= {(doc.name, m) for m in re.findall(pattern, doc.read_text(encoding="utf-8"))}
    return found


def test_every_command_the_docs_name_is_installed():
    installed = set(console_scripts())
    named = cited(r"(?<![\w/.-])(slm-(?:[a-z]+-)*[a-z]+)(?= )")
    shipped = {"slm-books", "clm-books"}
    missing = sorted((doc, c) for doc, c in named if c not in installed and c not in shipped)
    assert not missing, missing


def test_every_script_the_docs_name_exists():
    named = cited(r"(?<![\w/.-])((?:local|egs/librispeech_slm/local)/[\w/.-]+\.(?:py|sh))")
    recipe = REPO / "egs" / "librispeech_slm"
    missing = sorted((doc, p) for doc, p in named if not (REPO / p).exists() and not (recipe / p).exists())
    assert not missing, missing
