"""The package tree of ``docs/architecture.md`` ("The engine's packages") names every package
of the engine, and only packages that exist: the page drew the old flat ``runtime/``,
``connectors/`` and ``state/`` long after they were split (issue 53, item 7)."""

from __future__ import annotations

import re

from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
ENGINE = ROOT / "airflow_checkpoint_provider" / "engine"
PAGE = ROOT / "docs" / "architecture.md"


def drawn_packages(page: str) -> set[str]:
    """The packages of the tree: in its first column, each ``name/`` at an indentation of
    2 per level, below the ``engine/`` line."""
    section = page.split("## The engine's packages", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, re.S)
    assert block, "no text block under 'The engine's packages'"
    stack: list[str] = []
    found = set()
    for line in block.group(1).splitlines()[1:]:  # the first line is engine/ itself
        first = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0] if line.strip() else ""
        depth = (len(line) - len(line.lstrip())) // 2
        if not first or depth == 0:
            continue
        names = [t[:-1] for t in first.split() if t.endswith("/")]
        if not names:
            continue
        del stack[depth - 1:]
        for name in names:
            found.add("/".join([*stack, name]))
        stack.append(names[-1])
    return found


def engine_packages() -> set[str]:
    return {p.parent.relative_to(ENGINE).as_posix() for p in ENGINE.rglob("__init__.py")
            if p.parent != ENGINE and "__pycache__" not in p.parts}


def test_the_architecture_page_draws_every_engine_package_and_no_other():
    drawn, actual = drawn_packages(PAGE.read_text(encoding="utf-8")), engine_packages()
    assert {"runtime/task", "runtime/operators/joins", "connectors/postgres/cdc",
            "state/heap"} <= actual
    assert drawn == actual, (f"not drawn: {sorted(actual - drawn)}; drawn but not in the "
                             f"tree: {sorted(drawn - actual)}")


def test_the_tree_reader_follows_the_indentation():
    page = ("## The engine's packages\n```text\nengine/\n  a/ b/       x\n    c/\n"
            "      d/     y\n  e.py        z\n```\n")
    assert drawn_packages(page) == {"a", "b", "b/c", "b/c/d"}


def _layers_of_the_layer_test() -> list[str]:
    """The layer names of tests/unit/architecture/test_layers.py, top to bottom (read from its source)."""
    import ast

    tree = ast.parse((ROOT / "tests" / "unit" / "architecture" / "test_layers.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "LAYERS":
            return [name for name, _ in ast.literal_eval(node.value)]
    raise AssertionError("no LAYERS in tests/unit/architecture/test_layers.py")


def test_the_layer_table_lists_the_layers_the_layer_test_enforces_in_order():
    section = PAGE.read_text(encoding="utf-8").split("## The engine's layers", 1)[1]
    rows = re.findall(r"^\| ([^|]+?) \| [^|]*\| [^|]*\|$", section.split("\n## ", 1)[0], re.M)
    drawn = [r for r in rows if r not in ("layer (top to bottom)", "---")]
    assert drawn == _layers_of_the_layer_test()
