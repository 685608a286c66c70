"""Issue 37, item 2: DAG blue_green_upgrade of a PostgreSQL CDC job with dag.test() (local
runner, the test PostgreSQL server as the source, writers changing it throughout).

Green must read its own replication slot, copied from blue's *before* the hand-over
savepoint (blue acknowledges each completed checkpoint, so a copy made later, when green
starts, is past the hand-over position and green is refused). Before, the DAG never copied
(a documented manual step): with writers running, start_green failed with "was copied from
... only now". Now task ``copy_cdc_slots`` does; the published changelog (blue's, then live
green's) replays to the source table row for row. About 90 s.
"""

from __future__ import annotations

import os
import time

import pytest
from cdc_pipelines import committed_in_order, items_database, replay, source_table, start_writers
from provider_helpers import completed_checkpoints, run_dag, start_job, wait_for, xcom

from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import job_object_name
from airflow_checkpoint_provider.engine.errors import ConfigurationError

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]
CDC = "airflow_checkpoint_provider.examples.postgres_cdc:build"


@pytest.fixture
def db(postgres_server):
    yield from items_database(postgres_server, 500, 10)


@pytest.mark.timeout(300)
def test_blue_green_dag_of_a_cdc_job_copies_green_slot_before_the_handover(
        db, airflow_db, metadata_url, store, tmp_path, monkeypatch):
    env = {"CKPT_CDC_URL": db, "CKPT_CDC_TABLES": "items",
           "CKPT_EXAMPLE_DIR": str(tmp_path / "example")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    blue = start_job(metadata_url, tmp_path, pipeline=CDC, job_name="cdc-blue")
    wait_for(lambda: completed_checkpoints(store, blue), 60, "a checkpoint of blue")
    writers = start_writers(db, 20, [21, 22])
    # in_place off: this test proves the resubmit path with CDC (PROMOTE in place is not yet
    # tested with a CDC source)
    conf = {"blue_job": "cdc-blue", "green_job": "cdc-green", "green_pipeline": CDC, "in_place": False,
            "savepoint_dir": str(tmp_path / "example" / "savepoints"), "runner": "local",
            # the URL and directory are the worker's environment (set above), never the conf's
            "job_env": {"CKPT_CDC_TABLES": "items"}, "min_checkpoints": 2, "gate_window_s": 6, "max_restarts": 0,
            "max_checkpoint_duration_ms": None, "min_throughput_ratio": None,
            "max_watermark_lag_growth_ms": None, "max_backlog_growth_ms": None,
            "exactly_once": True, "handover": "savepoint", "cutover": "savepoint",
            "max_checkpoint_age_s": None, "require_approval": False}
    try:
        state, tis, dr = run_dag(airflow_db, "blue_green_upgrade", conf)
    finally:
        for p in writers:
            p.join()
    assert state == "success", tis
    assert tis["copy_cdc_slots"] == "success" and tis["go_live"] == "success", tis
    [copied] = xcom(dr, "copy_cdc_slots")
    assert (copied["uid"], copied["from"], copied["to"], copied["status"]) == (
        "cdc", job_object_name("cdc-blue"), job_object_name("cdc-green"), "created")
    live = store.get_job(xcom(dr, "go_live", key="job_id"))
    assert live.job_name == "cdc-green" and live.status == "RUNNING"
    assert live.dag_id == "blue_green_upgrade", "the submit operator records its DAG (plugin)"
    assert store.get_job(blue).status == "STOPPED"
    out = str(tmp_path / "example" / "cdc-out")
    expected = source_table(db)

    def caught_up() -> bool:
        return replay(committed_in_order(out)) == expected

    wait_for(caught_up, 90, "live green's changelog replaying to the source table")
    fenced = xcom(dr, "start_green", key="job_id")
    assert not [n for n in os.listdir(out) if fenced in n], "the fenced green published"

    # idempotent: a retry (green's slot not past blue's) keeps it; green's slot in use
    # (live green reads it) is refused, naming it
    from airflow_checkpoint_provider.engine.cli.common import load_pipeline
    from airflow_checkpoint_provider.engine.connectors.postgres.cdc.handover import copy_slots

    graph = load_pipeline(CDC).execution_graph()
    with pytest.raises(ConfigurationError, match="green's replication slot .* is in use"):
        copy_slots(graph, blue_job="cdc-blue", green_job="cdc-green")
    store.submit_control_request(live.job_id, "CANCEL", {})
    wait_for(lambda: store.get_job(live.job_id).status == "CANCELED", 60, "green cancelled")
    deadline = time.monotonic() + 30
    while True:  # the slot is released once the job's replication connection closed
        try:
            [again] = copy_slots(graph, blue_job="cdc-blue", green_job="cdc-green")
            assert again["status"] == "kept", again
            break
        except ConfigurationError as exc:
            if "in use" not in str(exc):  # live green acknowledged past blue's final position
                assert f"{job_object_name('cdc-green')!r} exists and is confirmed at" in str(exc)
                assert "ckpt cdc drop-slot" in str(exc)
                break
            assert time.monotonic() < deadline, "green's slot stayed in use"
            time.sleep(0.5)

def test_copy_cdc_slots_is_a_no_op_without_a_cdc_source_and_refuses_a_shared_slot():
    from airflow_checkpoint_provider.engine import GeneratorSource, Pipeline
    from airflow_checkpoint_provider.engine.connectors.files.sink import FileSink
    from airflow_checkpoint_provider.engine.connectors.postgres.cdc.handover import copy_slots
    from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import PostgresCdcSource

    p = Pipeline("plain")
    p.source(GeneratorSource(10), uid="gen").sink(FileSink("/nonexistent"), uid="out")
    assert copy_slots(p.execution_graph(), blue_job="a", green_job="b") == []
    q = Pipeline("shared")
    q.source(PostgresCdcSource("postgresql://127.0.0.1:1/x", ["items"], slot="one"),
             uid="cdc").sink(FileSink("/nonexistent"), uid="out")
    with pytest.raises(ConfigurationError, match="CDC source 'cdc' sets slot='one'"):
        copy_slots(q.execution_graph(), blue_job="a", green_job="b")
