"""The savepoint upgrade workflow on a Kafka-to-Kafka job, end to end with dag.test() (local
runner, SQLite metadata DB, a Tansu broker on 127.0.0.1 started and stopped here).

A DAG file of a few lines (the one docs/how-to/kafka.md shows) calls
:func:`~airflow_checkpoint_provider.workflows.savepoint_upgrade` with the bundled Kafka
example (``airflow_checkpoint_provider.examples.kafka_sum``: a keyed running sum from a
3-partition topic to another, exactly once). v1 runs and input keeps arriving during the
whole upgrade: pre-flight (v2 restores a fresh savepoint of v1), v1 stops with a savepoint
(its read offsets of every partition and its last epoch, published), v2 starts from it and
checkpoints. The output topic read with ``read_committed`` holds every input record's result
exactly once: v2 read on from v1's offsets (0 duplicates, 0 missing against the reference)."""

from __future__ import annotations

import sys
import textwrap
from datetime import UTC, datetime

import pytest
from kafka_dag_helpers import PARTITIONS, drained_output, start_kafka_sum
from kafka_server import broker_fixture
from provider_helpers import run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")

UPGRADE_DAG = '''
from datetime import datetime

from airflow.sdk import DAG

from airflow_checkpoint_provider.params import EXAMPLE_ENV, example_savepoint_roots
from airflow_checkpoint_provider.workflows import savepoint_upgrade

KAFKA_SUM = "airflow_checkpoint_provider.examples.kafka_sum"

with DAG("kafka_savepoint_upgrade", schedule=None, start_date=datetime(2026, 1, 1),
         catchup=False, render_template_as_native_obj=True, tags=["kafka", "upgrade"]):
    savepoint_upgrade(
        pipelines={"v1": f"{KAFKA_SUM}:build_v1", "v2": f"{KAFKA_SUM}:build_v2"},
        job_name="kafka-sum", job_env=EXAMPLE_ENV, savepoint_roots=example_savepoint_roots)
'''

#: a Tansu broker for this module (tests/support/kafka_server.py)
kafka_broker = broker_fixture(scope="module")


@pytest.fixture
def kafka_upgrade_dag(airflow_db, tmp_path):
    """The DAG file in a DAG folder of its own, parsed and written to Airflow's DB."""
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.dagbundle import DagBundleModel
    from airflow.utils.session import create_session

    folder = tmp_path / "kafka-dags"
    folder.mkdir()
    (folder / "kafka_savepoint_upgrade.py").write_text(textwrap.dedent(UPGRADE_DAG))
    with create_session() as session:
        session.merge(DagBundleModel(name="kafka-dags"))
    bag = DagBag(dag_folder=str(folder), bundle_path=folder, bundle_name="kafka-dags")
    assert not bag.import_errors, bag.import_errors
    sync_bag_to_db(bag, "kafka-dags", None)
    yield bag
    sys.modules.pop("kafka_savepoint_upgrade", None)


@pytest.mark.timeout(300)
def test_kafka_job_upgraded_through_a_savepoint_is_exactly_once(
        kafka_upgrade_dag, metadata_url, store, tmp_path, kafka_broker, monkeypatch):
    first = start_kafka_sum(kafka_broker, monkeypatch, metadata_url, store, tmp_path,
                            job_name="kafka-sum", what="v1")
    v1, in_topic, out_topic, feed = first.job_id, first.in_topic, first.out_topic, first.feed
    conf = {"job_name": "kafka-sum", "v1_pipeline": "v1", "v2_pipeline": "v2",
            "savepoint_dir": str(tmp_path / "example" / "savepoints" / "upgrade"),
            "runner": "local", "job_env": {"CKPT_EXAMPLE_INTERVAL_MS": 300},
            "upgrade_mode": "savepoint", "max_checkpoint_age_s": None}
    try:
        state, tis, dr = run_dag(kafka_upgrade_dag, "kafka_savepoint_upgrade", conf)
    finally:
        n = feed.stop()
    stopped = datetime.now(UTC)
    assert state == "success", tis
    assert tis["upgraded"] == "success" and tis["restart_v1"] == "skipped", tis
    assert xcom(dr, "stop_v1", key="upgrade_mode_used") == "savepoint"
    savepoint = xcom(dr, "stop_v1")
    v2 = store.get_job(xcom(dr, "start_v2"))
    assert v2.version == "v2" and v2.status == "RUNNING" and v2.restored_from == savepoint
    assert store.get_job(v1).status == "STOPPED"
    # v2 reads from the offsets in v1's savepoint, not from the group's or the topic's start
    restored = _source_offsets(savepoint)
    assert set(restored) == {f"{in_topic}:{p}" for p in range(PARTITIONS)}
    assert 0 < sum(restored.values()) < n

    # the input stopped: v2 reads to its end; the output holds every record once
    rows, duplicates, missing = drained_output(kafka_broker, store, v2.job_id, out_topic,
                                               stopped, n, "v2")
    print(f"kafka savepoint upgrade DAG: {n} input records, {len(rows)} output records read "
          f"read_committed, duplicates {duplicates}, missing {missing}")
    assert (duplicates, missing) == (0, 0)
    assert {r["version"] for r in rows} == {"v1", "v2"}  # v1's output, then v2's
    # v2 processed exactly the records at or after the savepoint's offsets (record i is at
    # offset i // 3 of partition i % 3)
    v2_ids = {r["id"] for r in rows if r["version"] == "v2"}
    assert v2_ids == {i for i in range(n)
                      if i // PARTITIONS >= restored[f"{in_topic}:{i % PARTITIONS}"]}


def _source_offsets(savepoint: str) -> dict[str, int]:
    """``{"<topic>:<partition>": offset}`` of the Kafka source in a savepoint."""
    from airflow_checkpoint_provider.engine.runners.jobmaster.restore_plan import (
        restored_split_positions,
    )
    from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

    positions = restored_split_positions(load_snapshot(savepoint), "orders")
    return {split: pos["offset"] for split, pos in positions.items()}
