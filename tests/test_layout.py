"""The package layout holds: each stage's work in its own package, shared concerns below them.

Read from the source files (``ast``), not by importing, so a violation is found even in a module
no test imports. docs/ARCHITECTURE.md describes the rules these tests check.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The installed package name of each source folder (pyproject's package-dir).
SOURCES = {"agentune": ROOT / "agentune", "agentune.flows": ROOT / "flows",
           "agentune.tasks": ROOT / "tasks"}
STAGES = ("collect_queries", "build_scenarios", "build_templates", "synthesize", "build_dataset",
          "train", "train_retriever", "build_preferences", "evaluate")
# Shared packages, lowest first: a package may import those before it, never those after.
SHARED = ("store", "orchestration", "common", "llm", "agent", "tools", "environments",
          "tool_retrieval", "verifier", "rollouts")


def module_name(path: Path) -> str:
    for package, folder in sorted(SOURCES.items(), key=lambda kv: -len(str(kv[1]))):
        if path.is_relative_to(folder):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            return ".".join((package, *parts))
    raise AssertionError(path)


def source_files() -> list[Path]:
    return sorted(p for folder in SOURCES.values() for p in folder.rglob("*.py")
                  if "__pycache__" not in p.parts)


def imports_of(path: Path, *, runtime_only: bool) -> Iterator[tuple[int, str]]:
    """(line, module) for every ``agentune`` import; ``runtime_only`` skips those under
    ``if TYPE_CHECKING:`` (they never run, so they cannot form an import cycle)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    if runtime_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("agentune"):
                for alias in node.names:
                    # `from agentune.tasks.orchestration import reporting` imports a module.
                    candidate = f"{node.module}.{alias.name}"
                    yield node.lineno, candidate if _is_module(candidate) else node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("agentune"):
                    yield node.lineno, alias.name


def _is_module(name: str) -> bool:
    return name in MODULES


MODULES = {module_name(p): p for p in source_files()}


def package_of(module: str) -> str | None:
    """``agentune.tasks.<package>`` for a module below ``agentune.tasks``, else None."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[:2] == ["agentune", "tasks"]:
        return parts[2]
    return None


def test_tasks_holds_packages_only() -> None:
    loose = sorted(p.name for p in (ROOT / "tasks").glob("*.py")
                   if p.name not in ("__init__.py", "runtime.py"))
    assert loose == [], f"modules at the top of tasks/: {loose}"


def test_every_package_is_known_and_installed() -> None:
    packages = sorted(p.name for p in (ROOT / "tasks").iterdir()
                      if p.is_dir() and (p / "__init__.py").is_file())
    assert set(packages) <= set(STAGES) | set(SHARED), (
        f"a package neither a stage nor a shared concern: {set(packages) - set(STAGES) - set(SHARED)}"
        " (add it to docs/ARCHITECTURE.md and to this test)")
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                   ["packages"])
    on_disk = {module_name(p) for p in source_files() if p.name == "__init__.py"}
    assert on_disk - declared == set(), f"packages missing from pyproject.toml: {on_disk - declared}"


@pytest.mark.parametrize("stage", [s for s in STAGES if (ROOT / "tasks" / s).is_dir()])
def test_stage_package_has_its_entry_and_flow(stage: str) -> None:
    assert (ROOT / "tasks" / stage / "stage.py").is_file()
    assert (ROOT / "flows" / f"{stage}.py").is_file()


def test_no_stage_package_imports_another() -> None:
    found = []
    for path in source_files():
        own = package_of(module_name(path))
        for line, target in imports_of(path, runtime_only=False):
            other = package_of(target)
            if own in STAGES and other in STAGES and other != own:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert found == [], "stage packages import each other:\n" + "\n".join(found)


def test_shared_packages_import_only_below_themselves() -> None:
    found = []
    for path in source_files():
        own = package_of(module_name(path))
        if own not in SHARED:
            continue
        for line, target in imports_of(path, runtime_only=True):
            other = package_of(target)
            if other in STAGES or (other in SHARED and SHARED.index(other) > SHARED.index(own)):
                found.append(f"{path.relative_to(ROOT)}:{line} ({own}) imports {target}")
            if target.startswith("agentune.flows"):
                found.append(f"{path.relative_to(ROOT)}:{line} imports a flow: {target}")
    assert found == [], "a shared package imports upwards:\n" + "\n".join(found)


BENCHMARKS_PACKAGE = "agentune.tasks.evaluate.benchmarks"


def benchmark_of(module: str) -> str | None:
    """The benchmark package a module of the evaluate stage belongs to (None: the framework)."""
    parts = module.split(".")
    return parts[4] if module.startswith(BENCHMARKS_PACKAGE + ".") and len(parts) > 4 else None


def test_a_benchmark_depends_on_the_framework_only() -> None:
    """evaluate is a framework (tasks/evaluate/*.py) plus a package per benchmark
    (tasks/evaluate/benchmarks/<name>/): a benchmark imports no other benchmark, and the
    framework imports none, except the registry that lists them."""
    found = []
    for path in source_files():
        module = module_name(path)
        if not module.startswith("agentune.tasks.evaluate") or \
                module == "agentune.tasks.evaluate.registry":
            continue
        own = benchmark_of(module)
        for line, target in imports_of(path, runtime_only=False):
            other = benchmark_of(target)
            if other is not None and other != own:
                found.append(f"{path.relative_to(ROOT)}:{line} ({own or 'framework'}) imports "
                             f"{target}")
    assert found == [], "a benchmark package reaches into another:\n" + "\n".join(found)


def test_config_is_a_leaf() -> None:
    found = [f"{path.relative_to(ROOT)}:{line} imports {target}"
             for path in source_files() if module_name(path).startswith("agentune.config")
             for line, target in imports_of(path, runtime_only=False)
             if not target.startswith("agentune.config")]
    assert found == [], "agentune.config imports outside itself:\n" + "\n".join(found)


def test_no_import_cycles() -> None:
    graph = {name: {t for _, t in imports_of(path, runtime_only=True) if t in MODULES and t != name}
             for name, path in MODULES.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


def test_tests_mirror_the_packages() -> None:
    """Every test module below tests/<package>/ names a package that exists."""
    tests = ROOT / "tests"
    stray = []
    for path in tests.rglob("test_*.py"):
        rel = path.relative_to(tests)
        if len(rel.parts) == 1 or rel.parts[0] in ("support", "benchmarks", "drills", "flows"):
            continue
        if not ((ROOT / "tasks" / rel.parent).is_dir() or (ROOT / "agentune" / rel.parent).is_dir()):
            stray.append(str(rel))
    assert stray == [], f"tests under a folder that mirrors no package: {stray}"
