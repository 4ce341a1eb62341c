"""The layers of ``docs/design.md``, read from the source with ``ast`` (nothing is imported):
``run_files`` ← ``paw_gym`` ← ``wrappers`` ← ``agents`` ← ``training`` ← ``benchmarks``, each
importing only itself and the layers below it; inside ``training`` the same rule over its
levels (:data:`TRAINING_LEVELS`); and no import cycle between two files.

Every ``import`` and ``from ... import`` counts, at module level and inside functions (an import
inside a function still ties the two files together), as does ``importlib.import_module`` of a
literal name. Imports under ``if TYPE_CHECKING:`` do not: they never run. A package's own
``__init__`` is not counted as imported by ``import package.module`` (Python runs it, but it is
a re-export, not a dependency of the importer).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Lowest first: a module may import its own layer and the layers before it.
LAYERS = ("run_files", "paw_gym", "wrappers", "agents", "training", "benchmarks")
#: The levels inside ``training``, lowest first, each a tuple of the modules and subpackages
#: on it: a module of ``training`` may import its own level and the levels before it. A module
#: is on the level of the longest name here that it is or lies in (``training`` itself, the
#: package's lazy re-exports, is that name only); a new top-level file of ``training/`` needs
#: its entry.
TRAINING_LEVELS = (
    # configs that check themselves, checkpoints, launch, memory, metrics, numerics, the
    # trainer's data-file kinds
    ("training.infra",),
    # the run's settings and the model it trains
    ("training.config", "training.models"),
    # advantages, losses, the batch, the objective, the correction, async rollouts, the critic;
    # the trainer's parts: one update, the sampler, the replay recording
    ("training.rl",),
    # what stands on the RL parts: world models, warm starts
    ("training.world_model", "training.warmstart"),
    # what a run checks before and plays after: preflight, evaluation; the run's state on disk
    ("training.evaluate", "training.preflight", "training.run_state"),
    # the trainer and the runs built on it
    ("training.trainer", "training.demo", "training.presets"),
    # the entry points: the CLI and its commands, the TRL integration, the package's re-exports
    ("training", "training.cli", "training.commands", "training.integrations"),
)
#: Upward imports allowed: none (moved modules fail with a line naming the new path,
#: ``paw_gym.moved``; tests/test_moved_modules.py).
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def module_files() -> dict[str, Path]:
    """Dotted name -> file, for every module of the six layers (packages by their
    ``__init__``)."""
    modules = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


MODULES = module_files()


def _is_type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
        or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported_names(name: str, path: Path, node: ast.AST) -> list[str]:
    """The dotted names one import statement (or ``import_module("...")`` call) brings in."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            package = package[:len(package) - node.level + 1]
            base = ".".join(package + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        return [f"{base}.{alias.name}" for alias in node.names]
    if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module" \
            and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        return [node.args[0].value]
    return []


def _project_module(dotted: str) -> str | None:
    """The project module a dotted import name lands in (``pkg.module.Name`` -> ``pkg.module``),
    or None for a third-party or standard-library name."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def imports_of(name: str) -> set[str]:
    """The project modules that module ``name`` imports, anywhere in its file."""
    path = MODULES[name]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _is_type_checking_block(node):
            for child in node.orelse:  # an else branch runs
                visit(child)
            return
        for dotted in _imported_names(name, path, node):
            target = _project_module(dotted)
            if target and target != name:
                found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def layer_of(name: str) -> int:
    return LAYERS.index(name.split(".")[0])


def training_level_of(name: str) -> int | None:
    """The level (:data:`TRAINING_LEVELS`) of the ``training`` module ``name``, or None when no
    entry names it."""
    best = None
    for level, entries in enumerate(TRAINING_LEVELS):
        for entry in entries:
            if name == entry or (entry != "training" and name.startswith(entry + ".")):
                if best is None or len(entry) > len(best[1]):
                    best = level, entry
    return best[0] if best else None


def upward_in_training(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import of ``graph`` from a ``training`` module to one on a higher level."""
    found = []
    for name, targets in sorted(graph.items()):
        level = training_level_of(name)
        for target in sorted(targets):
            above = training_level_of(target)
            if level is not None and above is not None and above > level:
                found.append((name, target))
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_import_reader_sees_every_layer_and_imports_inside_functions():
    """A guard on the reader itself: it finds modules of every layer, and an import made inside
    a function (agents.envs imports agents.env_workers in ``action_format_of``)."""
    assert {name.split(".")[0] for name in MODULES} == set(LAYERS)
    assert "agents.env_workers" in GRAPH["agents.envs"]
    assert "agents.serialization" in GRAPH["training.rl.rollout_batch"]
    assert "run_files.outputs" in GRAPH["wrappers.replay"]


def test_no_module_imports_a_layer_above_its_own():
    upward = sorted((name, target) for name, targets in GRAPH.items() for target in targets
                    if layer_of(target) > layer_of(name))
    assert [pair for pair in upward if pair not in ALLOWED_UPWARD] == [], \
        "upward imports (layers, lowest first: " + " <- ".join(LAYERS) + ")"


def test_the_lowest_layer_imports_nothing_of_the_project():
    """``run_files`` (the output guard, the data-file schema) stands on nothing: every layer,
    the env package included, may use it."""
    assert {target.split(".")[0] for name, targets in GRAPH.items()
            if name.split(".")[0] == "run_files" for target in targets} <= {"run_files"}


def test_every_module_of_training_has_a_level():
    assert [name for name in MODULES if layer_of(name) == LAYERS.index("training")
            and training_level_of(name) is None] == [], \
        "add each new top-level file of training/ to TRAINING_LEVELS"


def test_no_module_of_training_imports_a_level_above_its_own():
    assert upward_in_training(GRAPH) == [], \
        "upward imports inside training/ (levels, lowest first: " + " <- ".join(
            "/".join(entry.removeprefix("training.") for entry in entries)
            for entries in TRAINING_LEVELS) + ")"


@pytest.mark.parametrize("graph, expected", [
    # the arrow issue 57 named: a checkpoint helper reaching up into the model loading
    ({"training.infra.checkpoint": {"training.models", "training.infra.metrics_log"}},
     [("training.infra.checkpoint", "training.models")]),
    ({"training.rl.objective": {"training.trainer"}},
     [("training.rl.objective", "training.trainer")]),
    ({"training.trainer": {"training.rl.objective", "training.infra.checkpoint"},
      "training": {"training.trainer"}, "training.commands.train": {"training.trainer"}}, []),
])
def test_the_level_check_finds_an_upward_import_inside_training(graph, expected):
    assert upward_in_training(graph) == expected


def test_the_allowed_upward_import_is_still_only_a_re_export():
    """The exception list names real imports: when the old path goes, so must its entry."""
    for name, target in ALLOWED_UPWARD:
        assert GRAPH.get(name) == {target}


def test_no_import_cycles_between_files():
    assert cycles(GRAPH) == []


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_the_cycle_finder_finds_cycles(graph, expected):
    assert cycles(graph) == expected


def test_the_library_tests_do_not_import_benchmarks():
    """``tests/`` checks the five library layers; what ``benchmarks/`` holds is tested in
    ``benchmarks/tests/`` (the same ``pytest`` runs both)."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if any(dotted.split(".")[0] == "benchmarks"
                   for dotted in _imported_names(name, path, node)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
