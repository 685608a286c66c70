"""bench/ measures the product as users run it: every benchmark imports the engine through its
public API only (issue 53 item 6), as tests/unit/architecture/test_import_contract.py keeps the Airflow side on
``engine.client``. A benchmark of an internal component belongs in tools/microbench/.

The public API, read from the sources (nothing is imported):

* ``airflow_checkpoint_provider.engine`` and ``engine.client``: the names in their ``__all__``;
* ``engine.connectors`` and each connector family package (``files``, ``postgres``,
  ``postgres.cdc``, ``lakehouse``, ``kafka``): the names their ``__init__`` exports
  (``__all__``);
* what the API reference documents: each ``::: target`` of docs/reference/*.md, a module
  (its ``__all__``, else its public names) or one object of a module;
* ``engine.vectorized_ops`` (its ``__all__``): the module of docs/how-to/vectorized-joins.md.

An import of anything else from ``airflow_checkpoint_provider.engine`` fails the test, with
the file, the line and the public path of the same name when there is one. Every file under
bench/ is held to it: there is no allow-list.
"""

from __future__ import annotations

import ast
import glob
import os
import re
from dataclasses import dataclass

import pytest
from repo_paths import REPO_ROOT

ROOT = str(REPO_ROOT)
ENGINE = "airflow_checkpoint_provider.engine"
#: modules whose exported names are public (``__all__``), besides the documented ones
NAMESPACES = (
    ENGINE,
    f"{ENGINE}.client",
    f"{ENGINE}.connectors",
    f"{ENGINE}.connectors.files",
    f"{ENGINE}.connectors.postgres",
    f"{ENGINE}.connectors.postgres.cdc",
    f"{ENGINE}.connectors.lakehouse",
    f"{ENGINE}.connectors.kafka",
    f"{ENGINE}.vectorized_ops",  # docs/how-to/vectorized-joins.md: users import from it
)

#: internal names whose public home has another name
RENAMED = {
    f"{ENGINE}.runners.spark:session_for": f"from {ENGINE}.client import spark_session",
    f"{ENGINE}.runners.spark.session:session_for": f"from {ENGINE}.client import spark_session",
    f"{ENGINE}.connectors.postgres.cdc.source:drop_slot": f"from {ENGINE}.client import drop_cdc_slot",
    f"{ENGINE}.connectors.postgres.cdc.slots:copy_slot": f"from {ENGINE}.client import copy_cdc_slot",
    f"{ENGINE}.connectors.postgres.cdc.slots:job_object_name":
        f"from {ENGINE}.client import cdc_object_name",
    f"{ENGINE}.connectors.postgres.cdc.source:job_object_name":
        f"from {ENGINE}.client import cdc_object_name",
}


def _module_file(module: str) -> str | None:
    base = os.path.join(ROOT, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.exists(path):
            return path
    return None


def _exports(module: str) -> set[str] | None:
    """The module's ``__all__`` (a literal list or tuple), or ``None`` without one."""
    path = _module_file(module)
    assert path, module
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if (isinstance(node, ast.Assign | ast.AnnAssign)
                and any(isinstance(t, ast.Name) and t.id == "__all__"
                        for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))):
            assert node.value is not None
            return set(ast.literal_eval(node.value))
    return None


def _top_level_names(module: str) -> set[str]:
    """Public names a module defines or imports at its top level (no ``__all__``)."""
    path = _module_file(module)
    assert path
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return {n for n in names if not n.startswith("_")}


@dataclass(frozen=True)
class PublicApi:
    #: module -> the names importable from it (modules whose names are all public)
    names: dict[str, set[str]]

    def allows_module(self, module: str) -> bool:
        return module in self.names

    def allows(self, module: str, name: str) -> bool:
        return (name in self.names.get(module, ())
                or (name != "*" and f"{module}.{name}" in self.names))  # a public submodule

    def replacement(self, name: str) -> str | None:
        """Where the same name is public (the shortest path), if anywhere."""
        homes = sorted((m for m, ns in self.names.items() if name in ns), key=len)
        return f"from {homes[0]} import {name}" if homes else None


def public_api() -> PublicApi:
    names: dict[str, set[str]] = {}
    for module in NAMESPACES:
        names.setdefault(module, set()).update(_exports(module) or set())
    for page in sorted(glob.glob(os.path.join(ROOT, "docs", "reference", "*.md"))):
        with open(page) as f:
            targets = re.findall(r"^::: *(airflow_checkpoint_provider\.engine[\w.]*)", f.read(), re.M)
        for target in targets:
            if _module_file(target):  # a documented module
                exported = _exports(target)
                names.setdefault(target, set()).update(
                    exported if exported is not None else _top_level_names(target))
            else:  # one documented object of a module
                module, _, obj = target.rpartition(".")
                assert _module_file(module), f"{page}: ::: {target} names no engine module"
                names.setdefault(module, set()).add(obj)
    return PublicApi(names)


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    module: str
    name: str | None
    hint: str | None

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}" if self.name else self.module

    def __str__(self) -> str:
        what = f"from {self.module} import {self.name}" if self.name else f"import {self.module}"
        return (f"{self.path}:{self.line}: {what} is not public"
                + (f"; use `{self.hint}`" if self.hint else ""))


def _is_engine(module: str) -> bool:
    return module == ENGINE or module.startswith(ENGINE + ".")


class _EngineImports(ast.NodeVisitor):
    """Collects the :class:`Violation` of one parsed file."""

    def __init__(self, rel: str, api: PublicApi) -> None:
        self.rel, self.api = rel, api
        self.found: list[Violation] = []
        self.aliases: dict[str, str] = {}  # local name -> public engine module

    def _module(self, module: str, line: int) -> None:
        if _is_engine(module) and not self.api.allows_module(module):
            self.found.append(Violation(self.rel, line, module, None, None))

    def _name(self, module: str, name: str, line: int) -> None:
        self.found.append(Violation(self.rel, line, module, name,
                                    RENAMED.get(f"{module}:{name}")
                                    or self.api.replacement(name)))

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._module(a.name, node.lineno)
            if a.asname and self.api.allows_module(a.name):
                self.aliases[a.asname] = a.name

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not node.module or node.level:
            return
        if node.module == "airflow_checkpoint_provider":
            self.aliases.update({a.asname or a.name: ENGINE for a in node.names
                                 if a.name == "engine"})
        elif _is_engine(node.module):
            for a in node.names:
                if not self.api.allows(node.module, a.name):
                    self._name(node.module, a.name, node.lineno)
                elif f"{node.module}.{a.name}" in self.api.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def visit_Call(self, node: ast.Call) -> None:
        if (node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and ast.unparse(node.func).endswith(("import_module", "__import__"))):
            self._module(node.args[0].value, node.lineno)
        self.generic_visit(node)

    def check_attributes(self, tree: ast.AST) -> None:
        """Attributes of a public module read through the name it is bound to."""
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in self.aliases and isinstance(node.ctx, ast.Load)
                    and not self.api.allows(self.aliases[node.value.id], node.attr)):
                self._name(self.aliases[node.value.id], node.attr, node.lineno)


def violations(path: str, api: PublicApi) -> list[Violation]:
    """The imports of engine internals in one file (functions and ``TYPE_CHECKING`` blocks
    included: a benchmark type-checked against an internal still depends on it), the
    attributes read from a public module bound to a name that it does not export
    (``import airflow_checkpoint_provider.engine as e; e.runners.spark``) and the module
    paths given to ``importlib.import_module``."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    imports = _EngineImports(os.path.relpath(path, ROOT), api)
    imports.visit(tree)
    imports.check_attributes(tree)
    return imports.found


def _bench_files() -> list[str]:
    return sorted(glob.glob(os.path.join(ROOT, "bench", "**", "*.py"), recursive=True))


API = public_api()


@pytest.mark.parametrize("path", _bench_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_a_benchmark_imports_only_the_engines_public_api(path):
    found = violations(path, API)
    assert not found, "\n".join(map(str, found))


def test_the_public_api_is_read_from_the_sources():
    assert API.allows(ENGINE, "Pipeline")
    assert API.allows(f"{ENGINE}.client", "MetadataStore")
    assert API.allows(f"{ENGINE}.connectors.kafka", "KafkaSource")
    assert API.allows(f"{ENGINE}.connectors.postgres.sink", "PostgresSink")  # api.md
    assert API.allows(f"{ENGINE}.state_io", "read_state_table")  # a documented module
    assert API.allows(ENGINE, "client")  # a public submodule
    assert not API.allows(f"{ENGINE}.catalog", "MetadataStore")
    assert not API.allows(f"{ENGINE}.connectors.postgres.sink", "rollback_prepared")
    assert API.allows(ENGINE, "committed_files")  # a FileSink's output, as bench/chaos reads it
    assert not API.allows(f"{ENGINE}.connectors.files.partitions", "read_partition_dir")
    assert API.replacement("MetadataStore") == f"from {ENGINE}.client import MetadataStore"
    for hint in RENAMED.values():  # every renamed home is public
        module, _, name = hint.removeprefix("from ").partition(" import ")
        assert API.allows(module, name), hint


def test_the_checker_names_file_line_and_replacement(tmp_path):
    sample = tmp_path / "bench_sample.py"
    sample.write_text(
        "import airflow_checkpoint_provider.engine as engine\n"
        "from airflow_checkpoint_provider.engine import Pipeline\n"
        "from airflow_checkpoint_provider.engine.catalog import MetadataStore\n"
        "def f():\n"
        "    from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend\n"
        "    import importlib\n"
        "    importlib.import_module('airflow_checkpoint_provider.engine.runtime.task')\n"
        "    return engine.Pipeline, engine.runners\n")
    found = [str(v).split(": ", 1)[1] for v in violations(str(sample), API)]
    assert sorted(found) == sorted([
        f"from {ENGINE}.catalog import MetadataStore is not public; "
        f"use `from {ENGINE}.client import MetadataStore`",
        f"from {ENGINE}.state.heap import HeapKeyedStateBackend is not public",
        f"import {ENGINE}.runtime.task is not public",
        f"from {ENGINE} import runners is not public",
    ]), found
    assert str(violations(str(sample), API)[0]).split(":")[1] in {"3", "5", "7", "8"}
