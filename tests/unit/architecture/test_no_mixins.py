"""Composition instead of mixins (issue 53, item 3): no class of the engine or of the provider
is a ``*Mixin``. A role a class shares is a collaborator it holds (``JobMaster``'s restore,
failover and promotion; ``StreamTask``'s ``SubtaskCheckpointCoordinator``; ``MetadataStore``'s
jobs, checkpoints, control, pins, keys and CDC slots; a PostgreSQL writer's ``LockWatch``; a
savepoint operator's ``_SavepointHandover``), not a base class that reads attributes its
subclasses set.

Read from the source with :mod:`ast` (nothing is imported): every ``class`` statement in
``airflow_checkpoint_provider/``, nested ones included. A mixin of a library the provider
builds on (Airflow's) is that library's design, not checked here.
"""

from __future__ import annotations

import ast
import os

from repo_paths import REPO_ROOT

ROOT = str(REPO_ROOT)
PACKAGE = os.path.join(ROOT, "airflow_checkpoint_provider")


def mixins_in(source: str, where: str) -> list[str]:
    """``where:line: class Name`` for each class named ``*Mixin`` that ``source`` defines
    (nested ones included)."""
    return [f"{where}:{node.lineno}: class {node.name}"
            for node in ast.walk(ast.parse(source, where))
            if isinstance(node, ast.ClassDef) and node.name.endswith("Mixin")]


def _package_files() -> list[str]:
    files = []
    for dirpath, dirnames, filenames in os.walk(PACKAGE):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        files += [os.path.join(dirpath, f) for f in filenames if f.endswith(".py")]
    return sorted(files)


def test_no_class_of_the_engine_or_the_provider_is_a_mixin():
    files = _package_files()
    assert any(f.endswith(os.path.join("engine", "runtime", "task", "stream_task.py")) for f in files)
    found = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            found += mixins_in(f.read(), os.path.relpath(path, ROOT))
    assert not found, ("a mixin where a collaborator belongs (hold an object of that role "
                       "instead; issue 53 item 3):\n" + "\n".join(found))


def test_the_scan_finds_a_mixin_at_module_level_and_nested():
    source = (
        "class RestoreMixin:\n"
        "    pass\n"
        "class JobMaster(RestoreMixin):\n"
        "    class _PinsMixin:\n"
        "        pass\n"
        "class MixinFree:\n"
        "    pass\n"
    )
    assert mixins_in(source, "m.py") == ["m.py:1: class RestoreMixin",
                                         "m.py:4: class _PinsMixin"]
