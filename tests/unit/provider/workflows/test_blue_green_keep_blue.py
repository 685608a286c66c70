"""``keep_blue``, the last task of a failed blue-green run, decides from the metadata DB:
a running blue is left alone; a blue that ended (a cut-over stopped it, then failed) fails
the task with where to restart it from, never "keeps running"."""

from __future__ import annotations

import importlib.util
import os

import pytest
from repo_paths import REPO_ROOT
from savepoint_helpers import make_job, make_savepoint

DAGS = str(REPO_ROOT / "dags")


class _TI:
    def __init__(self, green_id: str | None) -> None:
        self.green_id = green_id

    def xcom_pull(self, task_ids: str, key: str = "return_value"):
        assert (task_ids, key) == ("start_green", "job_id")
        return self.green_id


def _keep_blue():
    spec = importlib.util.spec_from_file_location(
        "blue_green_upgrade_dag", os.path.join(DAGS, "blue_green_upgrade.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag.get_task("keep_blue").python_callable


def test_a_running_blue_is_reported_and_returned(store):
    blue = make_job(store, name="orders-blue", status="RUNNING")
    green = make_job(store, name="orders-green", status="CANCELED")
    assert _keep_blue()(params={"blue_job": "orders-blue"}, ti=_TI(green)) == blue


def test_a_stopped_blue_fails_naming_its_savepoint(store, tmp_path):
    blue = make_job(store, name="orders-blue", status="STOPPED")
    savepoint = make_savepoint(store, tmp_path, blue, 7, hours_old=0.01)
    with pytest.raises(RuntimeError) as err:
        _keep_blue()(params={"blue_job": "orders-blue"}, ti=_TI(None))
    message = str(err.value)
    assert f"blue orders-blue ({blue}) is STOPPED, not running" in message
    assert f"restart it from its latest savepoint {savepoint}" in message
    assert "green never started" in message
