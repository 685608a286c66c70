"""The layout of tests/ (tests/README.md): helpers in support/, tests in unit/, integration/
and deployment/, unique test file names, and no server or Spark in a unit test."""

from __future__ import annotations

import ast
import re
from collections import Counter

from repo_paths import SUPPORT_DIR, TESTS_DIR

TEST_FOLDERS = ("unit", "integration", "deployment")
#: fixtures that start a server, Spark or a deployment (tests/conftest.py and the folders'
#: conftest.py): a test that uses one is an integration or deployment test
SERVER_FIXTURES = {"postgres_server", "s3_server", "s3_bucket", "kafka_broker", "spark_cluster",
                   "spark_env", "built_site", "deployment"}


def _py_files():
    return [p for p in TESTS_DIR.rglob("*.py") if "__pycache__" not in p.parts]


def test_test_file_names_are_unique():
    """pytest imports a test module by its file name (no packages in tests/): two files of
    one name in different folders fail the collection of the second."""
    names = Counter(p.name for p in _py_files() if p.name.startswith("test_"))
    assert [n for n, c in names.items() if c > 1] == []


def test_tests_are_in_the_test_folders_and_helpers_in_support():
    misplaced = []
    for p in _py_files():
        rel = p.relative_to(TESTS_DIR)
        top = rel.parts[0] if len(rel.parts) > 1 else None
        if p.name == "conftest.py":
            ok = top != "support"
        elif p.name.startswith("test_"):
            ok = top in TEST_FOLDERS
        else:  # a helper module (or a fixture's generator under support/fixtures)
            ok = top == "support"
        if not ok:
            misplaced.append(str(rel))
    assert misplaced == []


def test_support_holds_no_test():
    assert [p.name for p in SUPPORT_DIR.rglob("test_*.py")] == []


def test_unit_tests_use_no_server_or_spark_fixture():
    """A unit test starts no server, no Spark and no deployment (tests/README.md): one whose
    test or fixture asks for such a fixture belongs in tests/integration/."""
    offenders = []
    for p in sorted((TESTS_DIR / "unit").rglob("*.py")):
        text = p.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                used = {a.arg for a in node.args.args + node.args.kwonlyargs} & SERVER_FIXTURES
                offenders += [f"{p.relative_to(TESTS_DIR)}:{node.lineno} {u}" for u in used]
        if re.search(r"pytest\.mark\.(spark|slow)\b", text):
            offenders.append(f"{p.relative_to(TESTS_DIR)}: marked spark or slow")
    assert offenders == []
