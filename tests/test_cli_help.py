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


@pytest.mark.parametrize("command,target", sorted(console_scripts().items()))
def test_every_installed_command_answers_help(command, target):
    module = target.split(":")[0]
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout.lower()


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
