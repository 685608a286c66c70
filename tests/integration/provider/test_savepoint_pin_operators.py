"""Pin, unpin and retention operators called directly (a minimal task-instance stand-in) on
a real SQLite metadata DB and real savepoint directories."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest
from airflow.sdk.exceptions import AirflowException
from savepoint_helpers import FakeTI, make_job, make_savepoint

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.operators.savepoints import (
    DisposeSavepointsOperator,
    PinSavepointOperator,
    UnpinSavepointsOperator,
)


def _ti() -> FakeTI:
    return FakeTI("upgrade", "pin")


def test_a_dag_run_pins_a_savepoint_retention_keeps_it_until_the_run_unpins(metadata_url,
                                                                             tmp_path):
    store = MetadataStore(metadata_url)
    now = datetime.now(UTC)
    job = make_job(store)
    sps = [make_savepoint(store, tmp_path, job, i + 1, hours_old=h, now=now)
           for i, h in enumerate((3, 2, 1))]
    ti = _ti()
    ctx = {"ti": ti}

    pin = PinSavepointOperator(task_id="pin", path=sps[0]).execute(ctx)
    assert pin["holder"] == "airflow:upgrade/manual__1" and pin["location"] == sps[0]
    expires = datetime.fromisoformat(pin["expires_at"])
    assert timedelta(hours=23.9) < expires - now < timedelta(hours=24.1)  # default: one day

    retention = DisposeSavepointsOperator(task_id="retention", job_name="orders", max_count=1)
    assert retention.execute(ctx) == [sps[1]]
    report = ti.xcom["retention_report"]
    assert [(s["decision"], s["rule"]) for s in report["savepoints"]] == [
        ("kept", "pinned"), ("disposed", "disposed"), ("kept", "newest")]
    assert report["savepoints"][0]["reason"].startswith("pinned by airflow:upgrade/manual__1")
    assert report["kept"] == [sps[0], sps[2]] and report["max_count"] == 1

    with pytest.raises(AirflowException, match="pinned by airflow:upgrade/manual__1"):
        DisposeSavepointsOperator(task_id="dispose", paths=[sps[0]]).execute(ctx)

    assert UnpinSavepointsOperator(task_id="unpin").execute(ctx) == 1
    assert retention.execute(ctx) == [sps[0]]
    assert not os.path.exists(sps[0]) and os.path.exists(sps[2])
    store.close()


@pytest.mark.timeout(180)
def test_stop_with_savepoint_pins_its_savepoint_for_the_dag_run(metadata_url, tmp_path):
    from provider_helpers import start_job

    from airflow_checkpoint_provider.engine.client import active_pins
    from airflow_checkpoint_provider.engine.lifecycle.savepoints import canonical_location
    from airflow_checkpoint_provider.operators.control import StopWithSavepointOperator

    v1 = start_job(metadata_url, tmp_path)
    store = MetadataStore(metadata_url)
    ti = _ti()
    savepoint = StopWithSavepointOperator(
        task_id="stop_v1", job="versioned-sum", poll_interval=0.2,
        directory=str(tmp_path / "example" / "savepoints"),
        report_dir=str(tmp_path / "reports")).execute({"ti": ti})

    assert store.get_job(v1).status == "STOPPED"
    [pin] = active_pins(store, canonical_location(savepoint))
    assert pin.holder == "airflow:upgrade/manual__1" and pin.reason == "taken by task pin"
    assert ti.xcom["pinned_until"] == pin.expires_at.isoformat()
    assert timedelta(hours=23.9) < pin.expires_at - datetime.now(UTC) < timedelta(hours=24.1)
    store.close()
