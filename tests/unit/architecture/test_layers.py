"""The engine's layer contract (docs/architecture.md draws it).

Every engine module belongs to one layer (the longest matching prefix below wins); a module
may import modules of its own layer and of the layers below it, never of a layer above.
Every import counts: top-level, function-level and ``if TYPE_CHECKING`` ones (a lazy import
only hides an edge, and a type-only import still ties the two files together). Within the
engine no import circle remains, and no module exceeds 600 lines.
"""

from __future__ import annotations

import ast
import os

import pytest
from import_graph import cycles
from repo_paths import REPO_ROOT

ROOT = str(REPO_ROOT)
ENGINE = "airflow_checkpoint_provider.engine"
MAX_LINES = 600

#: top to bottom: (layer, module prefixes relative to the engine package; "" = its __init__)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("facade", ("", "client", "vectorized_ops")),
    ("entry points", ("cli", "launch", "packaging")),
    ("lifecycle", ("lifecycle", "state_io")),
    ("datastream", ("datastream",)),
    ("execution", ("execution",)),
    # the runners (local, spark/) start a job's slots; the job master below them is the same
    # for every runner and knows none
    ("runners", ("runners",)),
    ("job master", ("runners.jobmaster",)),
    # the runtime's three packages by role, each above the next; its own modules (batches)
    # at the bottom
    ("runtime: hosting", ("runtime.host",)),
    ("runtime: tasks", ("runtime.task",)),
    ("runtime: operators", ("runtime.operators", "runtime")),
    ("checkpointing", ("checkpoint",)),
    ("plan", ("plan",)),
    ("connectors", ("connectors",)),
    ("state", ("state", "snapshot")),
    ("catalog and protocol", ("catalog", "protocol")),
    ("file systems", ("fs",)),
    (
        "foundation",
        (
            "changelog",
            "config",
            "errors",
            "eventtime",
            "extras",
            "names",
            "serialization",
            "settings",
            "typed_codec",
        ),
    ),
]


#: imports a layer may not make although they run down (docs/architecture.md, "what it may not
#: do"): the DSL builds a plan and asks ``execution`` for a runner by name
SKIPPED_LAYERS: dict[str, tuple[str, ...]] = {"datastream": ("runners", "runtime")}


def _engine_modules() -> dict[str, str]:
    """Dotted module name -> file, for every engine module (Alembic scripts excluded)."""
    modules = {}
    for dirpath, _, names in os.walk(os.path.join(ROOT, *ENGINE.split("."))):
        if f"{os.sep}migrations" in dirpath:
            continue
        for n in names:
            if n.endswith(".py"):
                path = os.path.join(dirpath, n)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                modules[name.removesuffix(".__init__")] = path
    return modules


def _imports(name: str, path: str, modules: dict[str, str]) -> list[tuple[str, int]]:
    """(imported engine module, line) for every import in the file, TYPE_CHECKING and
    function-level ones included."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        for t in targets:
            while t and t not in modules:  # ``import a.b.c`` of a name inside a module
                t = t.rpartition(".")[0]
            if t.startswith(ENGINE) and t != name:
                found.append((t, node.lineno))
    return found


def _graph() -> dict[str, list[tuple[str, int]]]:
    modules = _engine_modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def layer_of(module: str) -> int:
    """The index (0 = top) of the layer of ``module``; the longest matching prefix wins."""
    rel = module.removeprefix(ENGINE).removeprefix(".")
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (rel == p or (p and rel.startswith(p + ".")) or (not p and not rel)) and len(
                p
            ) > best_len:
                best, best_len = i, len(p)
    if best is None:
        raise AssertionError(
            f"engine module {module} is in no layer: add it to LAYERS in "
            "tests/unit/architecture/test_layers.py and to docs/architecture.md"
        )
    return best


def upward_imports(graph: dict[str, list[tuple[str, int]]]) -> list[str]:
    bad = []
    for name, deps in sorted(graph.items()):
        for target, line in deps:
            if layer_of(target) < layer_of(name):
                bad.append(
                    f"{name}:{line} ({LAYERS[layer_of(name)][0]}) imports {target} "
                    f"({LAYERS[layer_of(target)][0]}, a layer above)"
                )
    return bad


def skipped_imports(graph: dict[str, list[tuple[str, int]]]) -> list[str]:
    bad = []
    for name, deps in sorted(graph.items()):
        rel = name.removeprefix(ENGINE + ".")
        for layer, banned in SKIPPED_LAYERS.items():
            if rel != layer and not rel.startswith(layer + "."):
                continue
            for target, line in deps:
                t = target.removeprefix(ENGINE + ".")
                if any(t == b or t.startswith(b + ".") for b in banned):
                    bad.append(f"{name}:{line} ({layer}) imports {target}")
    return bad


def test_every_engine_module_is_in_a_layer():
    for name in _engine_modules():
        layer_of(name)


def test_no_engine_module_imports_a_layer_above_it():
    bad = upward_imports(_graph())
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_the_dsl_imports_neither_the_runtime_nor_a_runner():
    """The specs the DSL builds are in plan/ (specs.py, vectorized_specs.py) or state/
    (the aggregations' spec), never in the runtime's operator modules."""
    bad = skipped_imports(_graph())
    assert not bad, "the DSL imports the runtime or a runner:\n" + "\n".join(bad)


def test_the_checker_sees_the_dsl_import_an_operator_module(tmp_path):
    path = tmp_path / "vectorized_ops.py"
    path.write_text("def f():\n    from ..runtime.operators.vectorized.max_join import X\n")
    name, target = f"{ENGINE}.datastream.vectorized_ops", f"{ENGINE}.runtime.operators.vectorized.max_join"
    graph = {name: _imports(name, str(path), {name: str(path), target: "x"})}
    assert skipped_imports(graph) == [f"{name}:2 (datastream) imports {target}"]


def test_the_engine_has_no_import_circle_type_checking_included():
    graph = _graph()
    assert f"{ENGINE}.runtime.task" in graph  # the walk saw the runtime
    found = cycles({name: {t for t, _ in deps} for name, deps in graph.items()})
    assert not found, found


@pytest.mark.parametrize("name", sorted(_engine_modules()))
def test_no_engine_module_is_over_600_lines(name):
    with open(_engine_modules()[name]) as f:
        lines = sum(1 for _ in f)
    assert lines <= MAX_LINES, f"{name} has {lines} lines (at most {MAX_LINES}: split it)"


# the checker itself: each rule fails on a made-up violation


def test_the_checker_sees_a_type_checking_import_upward(tmp_path):
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..datastream.api import Pipeline\n"
    path = tmp_path / "task.py"
    path.write_text(source)
    modules = {f"{ENGINE}.runtime.task": str(path), f"{ENGINE}.datastream.api": "x"}
    graph = {f"{ENGINE}.runtime.task": _imports(f"{ENGINE}.runtime.task", str(path), modules)}
    assert upward_imports(graph) == [
        f"{ENGINE}.runtime.task:3 (runtime: tasks) imports {ENGINE}.datastream.api "
        "(datastream, a layer above)"
    ]


def test_a_task_importing_its_slot_is_an_upward_import(tmp_path):
    """runtime/task/ knows its slot only through TaskEnvironment: an import of the hosting
    (runtime/host/) runs up, as one of the task from the operators does."""
    path = tmp_path / "stream_task.py"
    path.write_text("from ..host.slot import Slot\n")
    modules = {f"{ENGINE}.runtime.task.stream_task": str(path),
               f"{ENGINE}.runtime.host.slot": "x"}
    name = f"{ENGINE}.runtime.task.stream_task"
    assert upward_imports({name: _imports(name, str(path), modules)}) == [
        f"{name}:1 (runtime: tasks) imports {ENGINE}.runtime.host.slot (runtime: hosting, a "
        "layer above)"]
    assert layer_of(f"{ENGINE}.runtime.operators.base") > layer_of(name)


def test_the_checker_sees_a_function_level_import_upward(tmp_path):
    path = tmp_path / "graph.py"
    path.write_text("def f():\n    from ..runners import local\n    return local\n")
    modules = {
        f"{ENGINE}.plan.graph": str(path),
        f"{ENGINE}.runners.local": "x",
        f"{ENGINE}.runners": "y",
    }
    graph = {f"{ENGINE}.plan.graph": _imports(f"{ENGINE}.plan.graph", str(path), modules)}
    assert [t for t, _ in graph[f"{ENGINE}.plan.graph"]] == [f"{ENGINE}.runners.local"]
    assert len(upward_imports(graph)) == 1


def test_the_job_master_is_below_the_runners_and_an_executor_loads_none():
    """runners/jobmaster/ knows no runner (a runner hands it a launcher); what a Spark
    executor imports (the slot function's launcher, the pyspark daemon) reaches no job
    master, lazy imports included: executors stay light."""
    graph = _graph()
    assert layer_of(f"{ENGINE}.runners.jobmaster.master") > layer_of(f"{ENGINE}.runners.spark.runner")
    assert layer_of(f"{ENGINE}.runners.jobmaster.master") > layer_of(f"{ENGINE}.runners.local")
    assert f"{ENGINE}.runners.jobmaster.master" in {t for t, _ in graph[f"{ENGINE}.runners.local"]}
    for executor_side in ("spark.launcher", "spark.daemon"):
        seen, todo = set(), [f"{ENGINE}.runners.{executor_side}"]
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo += [t for t, _ in graph.get(module, [])]
        assert not {m for m in seen if m.startswith(f"{ENGINE}.runners.jobmaster")}, executor_side


def test_every_module_has_one_layer():
    assert LAYERS[layer_of(f"{ENGINE}.checkpoint.coordinator")][0] == "checkpointing"
    assert LAYERS[layer_of(f"{ENGINE}.client")][0] == "facade"
    assert LAYERS[layer_of(ENGINE)][0] == "facade"
    assert LAYERS[layer_of(f"{ENGINE}.runtime.host.slot")][0] == "runtime: hosting"
    assert LAYERS[layer_of(f"{ENGINE}.runtime.batches")][0] == "runtime: operators"
    with pytest.raises(AssertionError, match="is in no layer"):
        layer_of(f"{ENGINE}.brand_new_module")


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_relative_import_in_the_engine_names_a_module_that_exists():
    """A module moved to another package leaves no relative import pointing at its old
    place (a function-level ``from .max_join import ...`` only fails when it runs)."""
    modules = _engine_modules()
    dangling = []
    for name, path in modules.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
                if base not in modules:
                    dangling.append(f"{path}:{node.lineno}: {base}")
    assert not dangling, dangling
