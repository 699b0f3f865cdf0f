"""The package's import graph: no circle, and no import from a lower wing up to a higher one (module-level and
function-level imports both count)."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "slm_lm"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set) -> set:
    """The slm_lm modules that `path` imports anywhere in its code (`from slm_lm import x` names module x
    when x is a module)."""
    found = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per dot after the first
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return found & modules


def import_graph() -> dict:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(p, modules) - {module_name(p)} for p in paths}


def find_circle(graph: dict):
    """One import circle as a list of modules (first repeated at the end), or None."""
    state = {}

    def visit(module, stack):
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                circle = visit(target, stack + [target])
                if circle:
                    return circle
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            circle = visit(module, [module])
            if circle:
                return circle
    return None


def test_the_circle_finder_finds_a_circle():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_import_graph_of_slm_lm_has_no_circle():
    graph = import_graph()
    assert "slm_lm.scoring.scorer" in graph["slm_lm.bin.score"]  # the graph sees function-level imports
    circle = find_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle)


# The wings from the bottom up: a module imports only from its own wing and the wings before it (README.md,
# "Where things are").
WINGS = ("common", "data", "pretrained", "model", "scoring", "rescoring", "evaluation", "pretrain", "espnet_lm", "bin")


def wing(module: str) -> str:
    return module.split(".")[1]


def upward_imports(graph: dict) -> list:
    """(module, imported module) pairs where the import runs from a lower wing up to a higher one."""
    return [(module, target) for module, targets in sorted(graph.items()) if module != "slm_lm"
            for target in sorted(targets) if WINGS.index(wing(target)) > WINGS.index(wing(module))]


def test_every_module_of_the_package_is_in_a_wing():
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py"]
    assert sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()) == sorted(WINGS)


def test_the_upward_import_finder_finds_one():
    graph = {"slm_lm.model.kinds": {"slm_lm.common.fileio"}, "slm_lm.common.fileio": {"slm_lm.scoring.scorer"},
             "slm_lm.scoring.scorer": set()}
    assert upward_imports(graph) == [("slm_lm.common.fileio", "slm_lm.scoring.scorer")]


def test_no_import_runs_from_a_lower_wing_up_to_a_higher_one():
    graph = import_graph()
    assert "slm_lm.model.config" in graph["slm_lm.model.directory"]
    assert upward_imports(graph) == []
