"""The provider names job statuses through the engine's one enum, ``JobStatus`` of
``engine.client`` (issue 56), not as string literals: a typo (``"CANCELLED"``) or a status
the engine renames cannot hide in a quoted string. Docstrings and comments may still spell
them out; a control request's or a checkpoint's ``"FAILED"`` (other enums, not exported by
``engine.client``) is allowed where the comparison says whose status it is."""

from __future__ import annotations

import ast
from pathlib import Path

from repo_paths import REPO_ROOT

from airflow_checkpoint_provider.engine.client import JobStatus

ROOT = REPO_ROOT
PACKAGE = ROOT / "airflow_checkpoint_provider"
PROVIDER_DIRS = ("operators", "sensors", "triggers", "hooks", "links", "plugins")
PROVIDER_MODULES = ("assets.py", "deadlines.py", "params.py")
JOB_STATUSES = frozenset(s.value for s in JobStatus)
#: (file, left side of the comparison): statuses of something other than a job
NOT_JOB_STATUSES = {
    ("operators/control.py", "earlier.status"),  # the earlier try's control request
}


def provider_files() -> list[Path]:
    files = [p for d in PROVIDER_DIRS for p in sorted((PACKAGE / d).glob("*.py"))]
    return files + [PACKAGE / m for m in PROVIDER_MODULES]


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def job_status_literals(source: str, relpath: str = "") -> list[tuple[int, str]]:
    """(line, literal) of every string constant that is a job status, docstrings aside."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            if (relpath, ast.unparse(node.left)) in NOT_JOB_STATUSES:
                skip.update(id(c) for c in node.comparators if isinstance(c, ast.Constant))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in JOB_STATUSES
        and id(node) not in skip
    ]


def test_a_job_status_literal_is_found():
    source = '''"""Waits until RUNNING."""
def f(job, earlier):
    """``"STOPPED"`` in a docstring is fine."""
    # "LOST" in a comment too
    ok = job.status == JobStatus.RUNNING
    return job.status in ("FINISHED", "STOPPED") or f"{job.status} RUNNING"
'''
    assert job_status_literals(source) == [(6, "FINISHED"), (6, "STOPPED")]
    allowed = "def g(earlier):\n    return earlier.status == 'FAILED'\n"
    assert job_status_literals(allowed, "operators/control.py") == []
    assert job_status_literals(allowed, "operators/submit.py") == [(2, "FAILED")]


def test_the_provider_uses_the_job_status_enum():
    found = {
        f"{path.relative_to(PACKAGE)}:{line}": literal
        for path in provider_files()
        for line, literal in job_status_literals(
            path.read_text(), str(path.relative_to(PACKAGE))
        )
    }
    assert not found, f"use engine.client.JobStatus, not string literals: {found}"
