"""The scripts stand alone: none under local/ or a recipe's local/ edits sys.path or imports another script
(code they share lives in the slm_lm package), top-level local/ holds the environment scripts and one folder
per kind of script, each of its Python scripts answers --help, and every top-level script path that a script, the
package or BENCHMARKS.md names exists."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT_DIRS = [ROOT / "local", *sorted((ROOT / "egs").glob("*/local"))]
SCRIPTS = sorted(path for folder in SCRIPT_DIRS for path in folder.rglob("*.py"))
SCRIPT_NAMES = {path.stem for path in SCRIPTS}
LOADERS = {"spec_from_file_location", "run_path", "SourceFileLoader"}  # ways to import a file by its path
SCRIPT_PATH = re.compile(r"(?<![\w./-])local/[\w./-]+\.(?:py|sh)\b")


def standalone_problems(path: Path) -> list:
    """Lines of `path` that edit or read sys.path, import another script, or load a file as a module."""
    problems = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
            problems.append((node.lineno, "sys.path"))
        elif isinstance(node, ast.Attribute | ast.Name) and getattr(node, "attr", getattr(node, "id", None)) in LOADERS:
            problems.append((node.lineno, "loads a file as a module"))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            relative = isinstance(node, ast.ImportFrom) and node.level > 0
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [alias.name for alias in node.names]
            for module in modules:
                if relative or module.split(".")[0] in SCRIPT_NAMES:
                    problems.append((node.lineno, f"imports the script {module or '.'}"))
    return [f"line {line}: {problem}" for line, problem in sorted(problems)]


@pytest.mark.parametrize("path", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_a_script_imports_only_packages(path):
    assert standalone_problems(path) == []


def test_the_check_finds_path_edits_and_script_imports(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("import sys\nsys.path.insert(0, 'local')\nfrom plot_position_ce import parse_models\n"
                      "import importlib.util\nimportlib.util.spec_from_file_location('x', 'local/x.py')\n"
                      "from . import y\nfrom slm_lm.common.errors import fail\nimport json\n")
    assert "plot_position_ce" in SCRIPT_NAMES
    assert standalone_problems(script) == ["line 2: sys.path", "line 3: imports the script plot_position_ce",
                                           "line 5: loads a file as a module", "line 6: imports the script ."]


def test_top_level_local_holds_the_environment_scripts_and_one_folder_per_kind_of_script():
    top = [p.name for p in (ROOT / "local").iterdir() if not p.name.startswith(("__", "."))]
    assert sorted(top) == ["analyses", "benchmarks", "gpu", "run_tests.sh", "setup_env.sh"]


LOCAL_SCRIPTS = sorted((ROOT / "local").rglob("*.py"))


@pytest.mark.parametrize("path", LOCAL_SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in LOCAL_SCRIPTS])
def test_a_script_answers_help(path):
    proc = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and re.search(rf"^usage: \S*({path.name}|{path.stem}) ", proc.stdout, re.M), proc.stderr[-2000:]


def test_every_named_script_path_exists():
    sources = [ROOT / "BENCHMARKS.md", *sorted(p for p in (ROOT / "local").rglob("*") if p.suffix in (".py", ".sh")),
               *sorted((ROOT / "slm_lm").rglob("*.py"))]
    missing = [f"{source.relative_to(ROOT)}: {name}" for source in sources
               for name in SCRIPT_PATH.findall(source.read_text(encoding="utf-8")) if not (ROOT / name).is_file()]
    assert missing == []
