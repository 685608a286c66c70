"""The provider names statuses through the engine's enums, exported by ``engine.client``
(issues 53 and 56), not as string literals: a job's (``JobStatus``), a checkpoint's
(``CheckpointStatus``) and a control request's (``ControlRequestStatus``); and a trigger
event's status through ``triggers.conditions`` (``SUCCESS``, ``ERROR``, ``TIMEOUT``). A typo
(``"CANCELLED"``) or a status the engine renames cannot hide in a quoted string. Docstrings
and comments may still spell them out; the demo modules are checked too."""

from __future__ import annotations

import ast
from pathlib import Path

from repo_paths import REPO_ROOT

from airflow_checkpoint_provider.engine.client import (
    CheckpointStatus,
    ControlRequestStatus,
    JobStatus,
)
from airflow_checkpoint_provider.triggers import conditions

ROOT = REPO_ROOT
PACKAGE = ROOT / "airflow_checkpoint_provider"
PROVIDER_DIRS = ("operators", "sensors", "triggers", "hooks", "links", "plugins", "workflows")
PROVIDER_MODULES = ("assets.py", "deadlines.py", "params.py", "demo.py", "demo_upgrade.py")
JOB_STATUSES = frozenset(s.value for s in JobStatus)
#: every status literal the provider must name through an enum or a constant, and where to
#: find that name
STATUS_NAMES = {
    **{s.value: "engine.client.JobStatus" for s in JobStatus},
    **{s.value: "engine.client.CheckpointStatus" for s in CheckpointStatus},
    **{s.value: "engine.client.ControlRequestStatus" for s in ControlRequestStatus},
    **{s: "triggers.conditions.SUCCESS/ERROR/TIMEOUT"
       for s in (conditions.SUCCESS, conditions.ERROR, conditions.TIMEOUT)},
}
#: where a literal is the definition of its name
DEFINITIONS = {"triggers/conditions.py": {conditions.SUCCESS, conditions.ERROR,
                                          conditions.TIMEOUT}}
#: (file, left side of the comparison): literals that are not statuses of these kinds
NOT_STATUSES: set[tuple[str, str]] = set()


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


def job_status_literals(source: str, relpath: str = "",
                        statuses: frozenset[str] | set[str] | dict = JOB_STATUSES
                        ) -> list[tuple[int, str]]:
    """(line, literal) of every string constant in ``statuses``, docstrings aside."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            if (relpath, ast.unparse(node.left)) in NOT_STATUSES:
                skip.update(id(c) for c in node.comparators if isinstance(c, ast.Constant))
    defined = DEFINITIONS.get(relpath, set())
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in statuses
        and node.value not in defined
        and id(node) not in skip
    ]


#: trigger event statuses that are also ordinary words (a dict key ``"error"``): found only
#: as a ``"status"`` value or compared with one
EVENT_WORDS = frozenset({conditions.ERROR, conditions.TIMEOUT})


def _status_contexts(tree: ast.AST) -> set[int]:
    """ids of constants that are a ``"status"`` key's value or compared with a status."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            ids.update(id(v) for k, v in zip(node.keys, node.values, strict=True)
                       if isinstance(k, ast.Constant) and k.value == "status")
        elif isinstance(node, ast.Compare) and "status" in ast.unparse(node.left):
            ids.update(id(c) for c in ast.walk(node) if isinstance(c, ast.Constant))
    return ids


def status_literals(source: str, relpath: str = "") -> list[tuple[int, str]]:
    found = job_status_literals(source, relpath, STATUS_NAMES)
    words = [(line, v) for line, v in found if v in EVENT_WORDS]
    if not words:
        return found
    tree = ast.parse(source)
    in_context = {(c.lineno, c.value) for c in ast.walk(tree)
                  if isinstance(c, ast.Constant) and id(c) in _status_contexts(tree)}
    return [(line, v) for line, v in found if v not in EVENT_WORDS or (line, v) in in_context]


def test_a_job_status_literal_is_found():
    source = '''"""Waits until RUNNING."""
def f(job, earlier):
    """``"STOPPED"`` in a docstring is fine."""
    # "LOST" in a comment too
    ok = job.status == JobStatus.RUNNING
    return job.status in ("FINISHED", "STOPPED") or f"{job.status} RUNNING"
'''
    assert job_status_literals(source) == [(6, "FINISHED"), (6, "STOPPED")]


def test_checkpoint_control_request_and_trigger_event_literals_are_found():
    source = '''def g(rec, req, event):
    done = rec.status in ("COMPLETED", CheckpointStatus.SUBSUMED)
    ok = req.status == "SUCCEEDED" or req.status == "IN_PROGRESS"
    return event.get("status") == "success" or {"status": "timeout"}
'''
    assert sorted(status_literals(source)) == [
        (2, "COMPLETED"), (3, "IN_PROGRESS"), (3, "SUCCEEDED"), (4, "success"), (4, "timeout")]
    definition = 'SUCCESS, ERROR, TIMEOUT = "success", "error", "timeout"\n'
    assert status_literals(definition, "triggers/conditions.py") == []
    assert status_literals(definition, "operators/submit.py") != []
    words = 'health = {"error": "x"}\nlog("timeout")\nif e.get("status") == "error": pass\n'
    assert status_literals(words) == [(3, "error")]


def test_the_demo_modules_are_checked():
    checked = {str(p.relative_to(PACKAGE)) for p in provider_files()}
    assert {"demo.py", "demo_upgrade.py"} <= checked


def test_the_provider_names_statuses_through_the_enums():
    found = {
        f"{path.relative_to(PACKAGE)}:{line}": f"{literal!r} (use {STATUS_NAMES[literal]})"
        for path in provider_files()
        for line, literal in status_literals(path.read_text(), str(path.relative_to(PACKAGE)))
    }
    assert not found, f"status string literals in the provider: {found}"
