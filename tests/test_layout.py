"""The package's shape: small modules, no import cycles, MLflow in one package, rl8's names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rl8lite"
#: A module past this many lines is a hint to split it (STYLE.md: ~400).
MAX_LINES = 420


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def module_level_imports(name: str, path: Path) -> set[str]:
    """rl8lite modules ``name`` imports when it is imported (not under ``TYPE_CHECKING``,
    not inside functions): ``from X import y`` names ``X.y`` when that is a module, else ``X``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)

    visit(ast.parse(path.read_text()).body)
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    return {m for m in found if m in MODULES and m != name and m not in ancestors}


def test_no_module_is_past_the_size_that_asks_for_a_split() -> None:
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_there_are_no_import_cycles() -> None:
    graph = {name: module_level_imports(name, path) for name, path in MODULES.items()}
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycle = trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_only_the_tracking_package_imports_mlflow() -> None:
    importers = sorted(
        name for name, path in MODULES.items()
        if not name.startswith("rl8lite.tracking")
        and any(
            isinstance(node, (ast.Import, ast.ImportFrom))
            and any(
                (node.module or "").split(".")[0] == "mlflow" if isinstance(node, ast.ImportFrom)
                else alias.name.split(".")[0] == "mlflow" for alias in node.names
            )
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert importers == []


@pytest.mark.parametrize("name", [
    "rl8lite.env", "rl8lite.specs", "rl8lite.data", "rl8lite.models", "rl8lite.distributions",
    "rl8lite.conditions", "rl8lite.schedulers", "rl8lite.algorithms", "rl8lite.trainers", "rl8lite.nn",
    "rl8lite.nn.functional", "rl8lite.nn.modules", "rl8lite.views",
])
def test_rl8s_public_modules_are_where_rl8_users_import_them(name: str) -> None:
    assert importlib.import_module(name).__doc__


def test_model_building_blocks_do_not_import_the_algorithm_package() -> None:
    """Models import rl8lite.nn and rl8lite.views; the algorithm package imports models."""
    graph = {name: module_level_imports(name, path) for name, path in MODULES.items()}
    for root in ("rl8lite.nn", "rl8lite.views"):
        seen, todo = set(), [root]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        assert not {m for m in seen if m.startswith(("rl8lite.algorithms", "rl8lite.models"))}, (root, seen)


def test_classes_stored_by_their_old_dotted_paths_still_import() -> None:
    from rl8lite import Algorithm, AlgorithmConfig, RecurrentAlgorithm, Trainer
    from rl8lite.runtime.imports import import_dotted_path

    assert import_dotted_path("rl8lite.algorithm.Algorithm") is Algorithm
    assert import_dotted_path("rl8lite.algorithm.RecurrentAlgorithm") is RecurrentAlgorithm
    assert import_dotted_path("rl8lite.config:AlgorithmConfig") is AlgorithmConfig
    assert import_dotted_path("rl8lite.trainer.Trainer") is Trainer
