"""The threat-model page names a test for every role, and every test it names exists
(docs/operations/threat-model.md): a renamed or removed test fails here, not silently."""

from __future__ import annotations

import ast
import re

from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
PAGE = ROOT / "docs" / "operations" / "threat-model.md"
ROLES = ("Airflow admin", "DAG author", "User who may trigger a DAG", "Viewer",
         "Local OS user", "Metadata-DB writer", "Checkpoint-storage writer", "Network peer")
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")


def _rows() -> dict[str, str]:
    rows = {}
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] not in ("Role", "---"):
            rows[cells[0]] = cells[3]
    return rows


def test_every_role_has_a_row_naming_at_least_one_test():
    rows = _rows()
    for role in ROLES:
        row = next((proof for name, proof in rows.items() if name.startswith(role)), None)
        assert row is not None, f"no row for {role}"
        assert REFERENCE.search(row), f"the row of {role} names no test"


def test_every_test_the_page_names_exists():
    missing = []
    for path, name in REFERENCE.findall(PAGE.read_text()):
        source = ROOT / path
        if not source.exists():
            missing.append(path)
            continue
        if name:
            defined = {n.name for n in ast.walk(ast.parse(source.read_text()))
                       if isinstance(n, ast.FunctionDef)}
            if name not in defined:
                missing.append(f"{path}::{name}")
    assert not missing, f"the threat model names tests that do not exist: {missing}"
