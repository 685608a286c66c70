"""Import contracts: the engine never imports Airflow; the Airflow side (hooks, operators,
sensors, triggers, links, plugins, DAGs) uses only the engine's public client module."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
