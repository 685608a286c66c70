"""Asset URIs of savepoints/checkpoints, the operators' alias outlets, and the metadata
connection form Airflow builds from the provider info."""

from __future__ import annotations

import pytest
from airflow.sdk import Asset, AssetAlias

from airflow_checkpoint_provider.assets import (
    SAVEPOINTS_ALIAS,
    asset_uri,
    checkpoint_asset,
    savepoint_asset,
)
from airflow_checkpoint_provider.engine.client import InvalidNameError
from airflow_checkpoint_provider.operators.control import (
    StopWithSavepointOperator,
    TriggerSavepointOperator,
)


def test_one_stable_uri_per_job_name_and_kind():
    assert savepoint_asset("orders.v2_eu-1").uri == "checkpoint://orders.v2_eu-1/savepoints"
    assert checkpoint_asset("orders") == Asset("checkpoint://orders/checkpoints")
    for bad in ("", "a/b", "../x", "-x", "with space"):
        with pytest.raises(InvalidNameError):
            asset_uri(bad)
    with pytest.raises(ValueError, match="SAVEPOINT or CHECKPOINT"):
        asset_uri("orders", "STATE")


def test_the_provider_validates_checkpoint_uris_declared_in_dags(airflow_db):
    with pytest.raises(InvalidNameError):
        Asset("checkpoint://bad name/savepoints")
    with pytest.raises(ValueError, match="/savepoints or /checkpoints"):
        Asset("checkpoint://orders/other")


def test_savepoint_operators_declare_the_alias_outlet_unless_told_not_to():
    op = TriggerSavepointOperator(task_id="sp", job="{{ params.job }}",
                                  outlets=[Asset("s3://b/report")])
    assert op.outlets == [Asset("s3://b/report"), AssetAlias(SAVEPOINTS_ALIAS)]
    assert StopWithSavepointOperator(task_id="stop", job="j").outlets == [
        AssetAlias(SAVEPOINTS_ALIAS)]
    assert TriggerSavepointOperator(task_id="quiet", job="j", emit_asset=False).outlets == []


def test_the_connection_form_declares_url_and_driver_fields(airflow_db):
    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    widgets = {k: w for k, w in pm.connection_form_widgets.items()
               if k.startswith("extra__checkpoint_metadata__")}
    assert sorted(w.field_name for w in widgets.values()) == ["driver", "url"]
    assert widgets["extra__checkpoint_metadata__url"].field["schema"]["title"] == "SQLAlchemy URL"
    behaviour = pm.field_behaviours["checkpoint_metadata"]
    assert behaviour["relabeling"]["host"] == "Host, SQLAlchemy URL or SQLite path"
    assert behaviour["placeholders"]["extra__checkpoint_metadata__url"].startswith("sqlite:")


def test_a_checkpoint_sensor_can_emit_the_checkpoint_it_saw(metadata_url, tmp_path):
    from airflow.sdk.execution_time.context import OutletEventAccessors
    from savepoint_helpers import make_job, make_savepoint

    from airflow_checkpoint_provider.assets import CHECKPOINTS_ALIAS
    from airflow_checkpoint_provider.engine.catalog import MetadataStore
    from airflow_checkpoint_provider.sensors.checkpoint import CheckpointCompletedSensor

    store = MetadataStore(metadata_url)
    job = make_job(store, "orders", "RUNNING")
    location = make_savepoint(store, tmp_path, job, 7, hours_old=0, kind="CHECKPOINT")
    sensor = CheckpointCompletedSensor(task_id="seen", job="orders", emit_asset=True)
    assert sensor.outlets == [AssetAlias(CHECKPOINTS_ALIAS)]
    outlet_events = OutletEventAccessors()

    result = sensor.poke({"outlet_events": outlet_events})

    assert result.is_done and result.xcom_value["checkpoint_id"] == 7
    [event] = outlet_events[AssetAlias(CHECKPOINTS_ALIAS)].asset_alias_events
    assert event.dest_asset_key.uri == "checkpoint://orders/checkpoints"
    assert {k: event.extra[k] for k in ("job_id", "job_name", "checkpoint_id", "location",
                                        "kind")} == {
        "job_id": job, "job_name": "orders", "checkpoint_id": 7, "location": location,
        "kind": "CHECKPOINT"}
    assert CheckpointCompletedSensor(task_id="quiet", job="orders").outlets == []
    store.close()
