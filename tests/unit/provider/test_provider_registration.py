"""The provider's registration is complete, and two defects of the operators stay fixed
(issue 56): a LOST job fails the submit task with the job's own reason, and a bad
``max_checkpoint_age`` of a last-state hand-over leaves no pin behind. ``deferrable``
follows Airflow's ``[operators] default_deferrable``."""

from __future__ import annotations

import importlib
import importlib.util
import os
from datetime import UTC, datetime

import pytest
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import BaseTrigger
from provider_classes import ROLES, public_classes
from savepoint_helpers import FakeTI

import airflow_checkpoint_provider
from airflow_checkpoint_provider import get_provider_info
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.operators.control import TriggerSavepointOperator
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.operators.upgrade import HandoverSnapshotOperator
from airflow_checkpoint_provider.sensors.checkpoint import JobStateSensor

PACKAGE = os.path.dirname(airflow_checkpoint_provider.__file__)


@pytest.mark.parametrize("role", ["operators", "sensors", "triggers", "hooks"])
def test_get_provider_info_lists_every_module_of_each_role(role):
    modules = {f"airflow_checkpoint_provider.{role}.{f[:-3]}"
               for f in os.listdir(os.path.join(PACKAGE, role))
               if f.endswith(".py") and f != "__init__.py"}
    listed = {m for entry in get_provider_info()[role] for m in entry["python-modules"]}
    helpers = {"hooks": ("job_env", "launcher", "secrets"), "operators": ("base",),
               "triggers": ("conditions",)}  # shared code, no operator/hook/trigger class
    modules -= {f"airflow_checkpoint_provider.{role}.{m}" for m in helpers.get(role, ())}
    assert modules <= listed, f"{role} not registered: {sorted(modules - listed)}"
    missing = [m for m in listed if importlib.util.find_spec(m) is None]
    assert not missing, f"{role} registered but missing: {missing}"


def test_every_public_class_is_registered_under_its_role():
    """Each public operator, sensor and trigger class (tests/support/provider_classes.py, from the
    source) lives in a module ``get_provider_info()`` lists for its role, a helper module
    included; the classes those modules define are exactly the ones found there."""
    info = get_provider_info()
    classes = public_classes()
    unregistered = [c.path for c in classes
                    if c.module not in {m for e in info[c.role] for m in e["python-modules"]}]
    assert not unregistered, f"not in get_provider_info(): {unregistered}"
    bases = (BaseOperator, BaseTrigger)
    imported = set()
    for role in ROLES:
        for module_name in {m for e in info[role] for m in e["python-modules"]}:
            module = importlib.import_module(module_name)
            imported |= {f"{module_name}.{name}" for name, obj in vars(module).items()
                         if isinstance(obj, type) and issubclass(obj, bases)
                         and obj.__module__ == module_name and not name.startswith("_")
                         and "Base" not in name}
    assert imported == {c.path for c in classes}


def test_a_lost_job_fails_the_submit_task_with_its_reason(metadata_url):
    with MetadataStore(metadata_url) as store:
        store.create_job(job_id="j1", job_name="orders", parallelism=1)
        store.set_job_status("j1", "LOST", failure_reason="no heartbeat since 10:00 UTC")
    op = SubmitCheckpointedJobOperator(task_id="submit", pipeline="m:f", job_name="orders")
    with pytest.raises(AirflowException, match="is LOST: no heartbeat since 10:00 UTC"):
        op.wait({"ti": FakeTI("d", "submit")}, "j1")


def test_a_bad_max_checkpoint_age_is_refused_before_anything_is_pinned(metadata_url, tmp_path):
    location = tmp_path / "chk-1"
    location.mkdir()
    with MetadataStore(metadata_url) as store:
        store.create_job(job_id="b1", job_name="blue", parallelism=1)
        store.set_job_status("b1", "RUNNING")
        now = datetime.now(UTC)
        store.add_pending_checkpoint("b1", 1, kind="CHECKPOINT", trigger_time=now,
                                     location=str(location))
        store.complete_checkpoint("b1", 1, complete_time=now, duration_ms=1, state_size=1,
                                  checkpointed_size=1, task_stats=[])
    op = HandoverSnapshotOperator(task_id="handover", job="blue", handover="last-state",
                                  max_checkpoint_age="ten minutes")
    with pytest.raises(AirflowException, match="max_checkpoint_age must be a number"):
        op.execute({"ti": FakeTI("d", "handover")})
    with MetadataStore(metadata_url) as store:
        assert store.list_savepoint_pins() == []


def test_deferrable_follows_airflows_default_deferrable(monkeypatch):
    assert TriggerSavepointOperator(task_id="a", job="j").deferrable is False
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert TriggerSavepointOperator(task_id="b", job="j").deferrable is True
    assert JobStateSensor(task_id="c", job="j").deferrable is True
    assert TriggerSavepointOperator(task_id="d", job="j", deferrable=False).deferrable is False
