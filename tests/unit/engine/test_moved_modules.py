"""The engine's own modules that moved into the package of their role (issue 53: no package
holds more than 15 modules) still import from their old paths, as the same module objects,
with a DeprecationWarning naming the new path; the engine itself imports only the new ones."""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import pytest

import airflow_checkpoint_provider.engine as engine
import airflow_checkpoint_provider.engine.runners as runners

BASE = "airflow_checkpoint_provider.engine"


@pytest.mark.parametrize(("old", "new", "name"), [
    ("private", "fs.private", "makedirs_private"),
    ("sink_names", "connectors.sink_names", "parse_part_file_name"),
    ("metrics", "runners.jobmaster.metrics", "JobMetrics"),
])
def test_an_old_engine_module_path_imports_the_same_module_with_a_warning(old, new, name):
    assert engine._MOVED[old] == new
    sys.modules.pop(f"{BASE}.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"{BASE}.{old} is deprecated: import from "
                                                f"{BASE}.{new}"):
        module = importlib.import_module(f"{BASE}.{old}")
    moved = importlib.import_module(f"{BASE}.{new}")
    assert module is moved
    assert getattr(module, name) is getattr(moved, name)
    assert moved.__name__ == f"{BASE}.{new}"  # classes keep their new module path
    assert moved.__spec__.name == f"{BASE}.{new}"  # the import of the old path left it alone


def test_a_name_imported_from_an_old_path_is_the_same_object():
    from airflow_checkpoint_provider.engine.runners.jobmaster.metrics import JobMetrics

    sys.modules.pop(f"{BASE}.metrics", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from airflow_checkpoint_provider.engine.metrics import JobMetrics as Old
    assert Old is JobMetrics


@pytest.mark.parametrize(("old", "new"), sorted(runners._MOVED.items()))
def test_an_old_runners_module_path_imports_the_same_module_with_a_warning(old, new):
    """runners/ was split into spark/ and jobmaster/ (issue 53): its old module paths stay."""
    sys.modules.pop(f"{BASE}.runners.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"{BASE}.runners.{old} is deprecated: import "
                                                f"from {BASE}.runners.{new}"):
        module = importlib.import_module(f"{BASE}.runners.{old}")
    assert module is importlib.import_module(f"{BASE}.runners.{new}")
    assert module.__name__ == f"{BASE}.runners.{new}"


def test_the_old_runners_faces_name_the_same_objects_without_a_warning():
    """``runners.spark`` and ``runners.jobmaster`` were modules; they are packages now whose
    names (``SparkRunner``, ``session_for``, ``JobMaster``, ...) come from their new modules."""
    from airflow_checkpoint_provider.engine.runners.jobmaster import master
    from airflow_checkpoint_provider.engine.runners.spark import launcher, runner, session

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        from airflow_checkpoint_provider.engine.runners.jobmaster import JobMaster
        from airflow_checkpoint_provider.engine.runners.spark import (
            SLOT_WAIT_ENV,
            SparkBarrierLauncher,
            SparkRunner,
            configured_master,
            session_for,
        )
    assert JobMaster is master.JobMaster
    assert (SparkRunner, SLOT_WAIT_ENV) == (runner.SparkRunner, runner.SLOT_WAIT_ENV)
    assert SparkBarrierLauncher is launcher.SparkBarrierLauncher
    assert (session_for, configured_master) == (session.session_for, session.configured_master)
    with pytest.raises(ImportError, match="no_such_name"):
        from airflow_checkpoint_provider.engine.runners.spark import no_such_name  # noqa: F401


def test_every_moved_module_exists_at_its_new_path_and_not_at_its_old_one():
    root = Path(engine.__file__).parent
    moved = [*engine._MOVED.items(),
             *((f"runners.{old}", f"runners.{new}") for old, new in runners._MOVED.items())]
    for old, new in moved:
        assert not (root / (old.replace(".", "/") + ".py")).exists(), old
        assert (root / (new.replace(".", "/") + ".py")).exists(), new


def test_no_engine_module_imports_an_old_path():
    """The old paths are for users: the engine imports its modules where they are (an
    absolute import included; relative ones to a missing file fail tests/unit/architecture/test_layers.py)."""
    root = Path(engine.__file__).parent
    old = (*(f"{BASE}.{name}" for name in engine._MOVED),
           *(f"{BASE}.runners.{name}" for name in runners._MOVED))
    found = [f"{path.relative_to(root)}: {line.strip()}"
             for path in root.rglob("*.py")
             for line in path.read_text().splitlines()
             if any(f"{o} " in line or f"{o}." in line or line.rstrip().endswith(o)
                    for o in old) and ("import" in line)]
    assert not found, found


@pytest.mark.parametrize(("package", "old", "new", "name"), [
    ("catalog", "control", "control_requests", "ControlRequests"),
    ("catalog", "keys", "snapshot_keys", "SnapshotKeys"),
    ("state", "vectorized", "key_hashing", "key_groups_of"),
])
def test_a_module_renamed_by_role_imports_from_its_old_path_with_a_warning(package, old, new,
                                                                           name):
    """Modules named by their role (issue 53 item 1): the old names still import."""
    pkg = importlib.import_module(f"{BASE}.{package}")
    assert pkg.MOVED[old] == new
    root = Path(engine.__file__).parent / package
    assert not (root / f"{old}.py").exists() and (root / f"{new}.py").exists()
    sys.modules.pop(f"{BASE}.{package}.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"{BASE}.{package}.{old} is deprecated: "
                                                f"import from {BASE}.{package}.{new}"):
        module = importlib.import_module(f"{BASE}.{package}.{old}")
    moved = importlib.import_module(f"{BASE}.{package}.{new}")
    assert module is moved and getattr(module, name) is getattr(moved, name)
    engine_root = Path(engine.__file__).parent
    importers = [str(p.relative_to(engine_root)) for p in engine_root.rglob("*.py")
                 if f"{package}.{old} import" in p.read_text()
                 or (p.parent.name == package and f"from .{old} import" in p.read_text())]
    assert not importers, importers
