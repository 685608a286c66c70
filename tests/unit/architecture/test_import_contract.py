"""Import contracts: the engine never imports Airflow; the Airflow side (hooks, operators,
sensors, triggers, links, plugins, DAGs) uses only the engine's public client module."""

from __future__ import annotations

import ast
import os

import pytest
from import_graph import cycles
from repo_paths import REPO_ROOT

ROOT = str(REPO_ROOT)
PACKAGE = os.path.join(ROOT, "airflow_checkpoint_provider")
PROVIDER_DIRS = ["hooks", "operators", "sensors", "triggers", "links", "plugins"]
#: what the Airflow side may import from the engine
PUBLIC = {"airflow_checkpoint_provider.engine.client"}


def _python_files(*dirs: str) -> list[str]:
    files = []
    for d in dirs:
        for dirpath, _, names in os.walk(d):
            files += [os.path.join(dirpath, n) for n in names if n.endswith(".py")]
    return sorted(files)


def _imports(path: str) -> list[str]:
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


@pytest.mark.parametrize("path", _python_files(os.path.join(PACKAGE, "engine")),
                         ids=lambda p: os.path.relpath(p, PACKAGE))
def test_the_engine_never_imports_airflow(path):
    bad = [m for m in _imports(path) if m == "airflow" or m.startswith("airflow.")]
    assert not bad, f"{path} imports {bad}"


def test_the_airflow_side_imports_only_the_engines_client_module():
    dirs = [os.path.join(PACKAGE, d) for d in PROVIDER_DIRS] + [os.path.join(ROOT, "dags")]
    offenders = {}
    for path in _python_files(*dirs):
        bad = [m for m in _imports(path)
               if m.startswith("airflow_checkpoint_provider.engine") and m not in PUBLIC]
        if bad:
            offenders[os.path.relpath(path, ROOT)] = bad
    assert not offenders, offenders


def test_the_example_pipelines_import_only_the_engine_api_and_each_other():
    """The bundled pipelines run on Spark executors that may hold only the shipped code and
    pyspark's own dependencies (``ship_code``): they import the engine's API, connectors and
    each other, never the provider's modules (whose settings module imports the engine's
    client, and so SQLAlchemy: a shipped job failed on an executor without it)."""
    offenders = {}
    for path in _python_files(os.path.join(PACKAGE, "examples")):
        bad = [m for m in _imports(path) if m.startswith("airflow_checkpoint_provider")
               and not m.startswith(("airflow_checkpoint_provider.engine",
                                     "airflow_checkpoint_provider.examples"))
               or m in ("airflow_checkpoint_provider.engine.client",
                        "airflow_checkpoint_provider.engine.catalog")]
        if bad:
            offenders[os.path.relpath(path, ROOT)] = bad
    assert not offenders, offenders


def _engine_modules() -> dict[str, str]:
    """Dotted module name -> file of every engine module (Alembic scripts excluded)."""
    modules = {}
    for path in _python_files(os.path.join(PACKAGE, "engine")):
        if f"{os.sep}migrations{os.sep}" in path:
            continue
        name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
        modules[name.removesuffix(".__init__")] = path
    return modules


def _runtime_import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Imports anywhere in the module, functions included, except under ``if TYPE_CHECKING``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _engine_import_graph() -> dict[str, set[str]]:
    modules = _engine_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        with open(path) as f:
            nodes = _runtime_import_nodes(ast.parse(f.read(), path))
        deps = set()
        for node in nodes:
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            deps |= {t for t in targets if t in modules and t != name}
        graph[name] = deps
    return graph


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_engine_has_no_import_cycles():
    """Function-level imports count too: a lazy import only hides a circle."""
    graph = _engine_import_graph()
    assert "airflow_checkpoint_provider.engine.runners.jobmaster.master" in graph  # the walk saw it
    assert not cycles(graph)


def test_an_attempt_does_not_import_its_job_master_even_for_type_checking():
    """runners/jobmaster/attempt.py describes what it needs of the job master as a Protocol
    (AttemptHost): the job master runs attempts (through its failover), never the other way
    round (nor through the package's face, which hands out ``JobMaster``)."""
    package = "airflow_checkpoint_provider.engine.runners.jobmaster"
    path = _engine_modules()[f"{package}.attempt"]
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):  # TYPE_CHECKING and function-level imports included
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        if {package, f"{package}.master"} & set(names):
            found.append(ast.unparse(node))
    assert not found, found
    assert f"{package}.attempt" in _engine_import_graph()[f"{package}.failover"]  # it is seen
