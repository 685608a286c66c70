"""DAG postgres_cdc end to end with dag.test() (local runner, the test PostgreSQL server as
the source), then DropCdcSlotOperator: refused while the job holds the slot, drops slot and
publication once it is cancelled (by URL or through an Airflow connection)."""

from __future__ import annotations

import json
import os
import re
import time

import psycopg
import pytest
from airflow.sdk.exceptions import AirflowException
from provider_helpers import run_dag, wait_for, xcom

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import job_object_name
from airflow_checkpoint_provider.operators.cdc import DropCdcSlotOperator

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]
SLOT = job_object_name("postgres-cdc")


def _dsn(url: str) -> str:
    return re.sub(r"^postgresql\+\w+://", "postgresql://", url)


def _objects(url: str) -> tuple[list, list]:
    with psycopg.connect(_dsn(url)) as conn:
        slots = conn.execute("SELECT slot_name FROM pg_replication_slots WHERE slot_name = %s",
                             (SLOT,)).fetchall()
        pubs = conn.execute("SELECT pubname FROM pg_publication WHERE pubname = %s",
                            (SLOT,)).fetchall()
    return slots, pubs


@pytest.mark.timeout(240)
def test_the_cdc_dag_submits_savepoints_and_gates_then_the_operator_drops_the_slot(
        airflow_db, metadata_url, postgres_server, tmp_path, monkeypatch):
    url = _dsn(postgres_server.create_database())
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, amount int)")
        conn.execute("INSERT INTO orders SELECT g, g FROM generate_series(1, 500) g")
    # the source is the DAG author's connection (resolved in the worker), never a conf's URL
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE", url)
    monkeypatch.delenv("CKPT_CDC_URL", raising=False)
    conf = {"runner": "local", "job_name": "postgres-cdc", "max_lag_seconds": 30,
            "gate_window_s": 4, "cdc_conn_id": "cdc_source",
            "job_env": {"CKPT_CDC_TABLES": "orders"}}

    state, tis, dr = run_dag(airflow_db, "postgres_cdc", conf)

    assert tis == {"start_cdc": "success", "savepoint": "success",
                   "replication_lag": "success"}, tis
    assert state == "success"
    savepoint = xcom(dr, "savepoint")
    assert os.path.isfile(os.path.join(savepoint, "_metadata"))
    store = MetadataStore(metadata_url)
    [job] = [j for j in store.list_jobs(job_name="postgres-cdc") if j.status == "RUNNING"]
    # the job replicates: a change reaches its output; lag travels with its checkpoints
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE orders SET amount = -1 WHERE id = 7")
    out = os.path.join(os.environ["CKPT_EXAMPLE_DIR"], "cdc-out")

    def changed():
        from airflow_checkpoint_provider.engine.connectors.files.sink import read_committed

        return any(r.get("id") == 7 and r["_op"] == "+U" for r in read_committed(out))

    wait_for(changed, 60, "the update in the job's committed output")
    lags = [t["source_lag"] for c in store.list_checkpoints(job.job_id)
            for t in c.task_stats or () if t.get("source_lag")]
    assert lags, "no checkpoint reported the replication lag"

    # the slot is in use: the operator refuses, naming it
    drop = DropCdcSlotOperator(task_id="drop_slot", job_name="postgres-cdc", url=url)
    with pytest.raises(AirflowException, match=f"cannot drop CDC slot {SLOT}.*stop the job"):
        drop.execute({})
    assert _objects(url) == ([(SLOT,)], [(SLOT,)])
    store.submit_control_request(job.job_id, "CANCEL", {})
    wait_for(lambda: store.get_job(job.job_id).status == "CANCELED", 60, "the cancel")
    # the slot is released when the job's replication connection closes
    deadline = time.monotonic() + 30
    while True:
        try:
            done = drop.execute({})
            break
        except AirflowException:
            assert time.monotonic() < deadline, "the slot stayed in use after the cancel"
            time.sleep(0.5)
    assert done == [f"slot {SLOT}", f"publication {SLOT}"]
    assert _objects(url) == ([], [])
    # through an Airflow connection, by slot name: nothing left to drop
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE", json.dumps(
        {"conn_type": "postgres", "host": "127.0.0.1", "port": postgres_server.port,
         "login": "postgres", "schema": url.rsplit("/", 1)[1]}))
    assert DropCdcSlotOperator(task_id="again", slot=SLOT, postgres_conn_id="cdc_source"
                               ).execute({}) == []
    with pytest.raises(ValueError, match="give job_name or slot"):
        DropCdcSlotOperator(task_id="bad", job_name="x", slot="y", url=url)
    store.close()
