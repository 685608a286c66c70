"""DAG kafka_blue_green end to end with dag.test() (local runner, SQLite metadata DB, a Tansu
broker on 127.0.0.1 started and stopped here): blue reads a 3-partition topic and writes a
running sum to another, input keeps arriving during the whole upgrade, green restores blue's
offsets from the hand-over savepoint, runs fenced until the caught-up gate passes and is
promoted in place; the output topic read with read_committed holds every input record's
result exactly once (0 duplicates, 0 missing against the reference)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kafka_dag_helpers import EXAMPLE, PARTITIONS, drained_output, start_kafka_sum
from kafka_server import broker_fixture
from provider_helpers import run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")

#: a Tansu broker for this module (tests/support/kafka_server.py)
kafka_broker = broker_fixture(scope="module")


def _conf(tmp_path, **overrides) -> dict:
    conf = {"blue_job": "kafka-sum-blue", "green_job": "kafka-sum-green",
            "green_pipeline": f"{EXAMPLE}:build_v2",
            "savepoint_dir": str(tmp_path / "example" / "savepoints"), "runner": "local",
            "job_env": {"CKPT_EXAMPLE_INTERVAL_MS": 300}, "min_checkpoints": 2,
            "gate_window_s": 3, "max_restarts": 0, "max_checkpoint_duration_ms": None,
            "min_throughput_ratio": None, "max_watermark_lag_growth_ms": None,
            "max_backlog_growth_ms": None, "exactly_once": True, "handover": "savepoint",
            "cutover": "savepoint", "max_checkpoint_age_s": None, "require_approval": False,
            "in_place": True, "max_lag": 0, "caught_up_for_s": 1}
    conf.update(overrides)
    return conf


@pytest.mark.timeout(300)
def test_kafka_job_cut_over_once_green_caught_up_is_exactly_once(
        airflow_db, metadata_url, store, tmp_path, kafka_broker, monkeypatch):
    first = start_kafka_sum(kafka_broker, monkeypatch, metadata_url, store, tmp_path,
                            job_name="kafka-sum-blue", what="blue")
    blue, in_topic, out_topic, feed = first.job_id, first.in_topic, first.out_topic, first.feed
    try:
        state, tis, dr = run_dag(airflow_db, "kafka_blue_green", _conf(tmp_path))
    finally:
        n = feed.stop()
    stopped = datetime.now(UTC)
    assert state == "success", tis
    assert tis["caught_up"] == "success" and tis["promote_green"] == "success", tis
    assert tis["cancel_green"] == "skipped" and tis["go_live"] == "skipped", tis
    caught_up = xcom(dr, "caught_up")
    green = xcom(dr, "start_green", key="job_id")
    assert caught_up["job_id"] == green and caught_up["total_lag"] == 0
    assert set(caught_up["partitions"]) == {f"{in_topic}:{p}" for p in range(PARTITIONS)}
    # green restored blue's hand-over savepoint (its offsets), then blue's final one in place
    attempts = store.list_attempts(green)
    assert [a.restored_from for a in attempts] == [xcom(dr, "savepoint_blue"),
                                                  xcom(dr, "stop_blue")], attempts
    assert store.get_job(blue).status == "STOPPED" and store.get_job(green).status == "RUNNING"

    # the input stopped: green reads to its end; the output holds every record once
    rows, duplicates, missing = drained_output(kafka_broker, store, green, out_topic, stopped,
                                               n, "green")
    print(f"kafka blue-green DAG: {n} input records, {len(rows)} output records read "
          f"read_committed, duplicates {duplicates}, missing {missing}")
    assert (duplicates, missing) == (0, 0)
    assert {r["version"] for r in rows} == {"v1", "v2"}  # both published, one after the other


@pytest.mark.parametrize(("param", "value"), [
    ("max_lag", -1), ("max_lag", 10**12), ("caught_up_for_s", 10**9),
    ("green_pipeline", "airflow_checkpoint_provider.examples.versioned_sum:build_v2"),
    ("job_env", {"CKPT_KAFKA_BOOTSTRAP": "evil:9092"}),  # the broker is the worker's, never conf
])
def test_a_runs_conf_stays_within_the_dags_bounds(airflow_db, param, value):
    from airflow.sdk.exceptions import ParamValidationError
    from airflow.serialization.serialized_objects import DagSerialization

    dag = DagSerialization.deserialize_dag(
        DagSerialization.serialize_dag(airflow_db.get_dag("kafka_blue_green")))
    with pytest.raises(ParamValidationError):
        dag.params.deep_merge({param: value}).validate()


def test_the_caught_up_gate_sits_between_green_start_and_the_cut_over(airflow_db):
    dag = airflow_db.get_dag("kafka_blue_green")
    gate = dag.get_task("caught_up")
    assert gate.upstream_task_ids == {"start_green"}
    assert gate.downstream_task_ids == {"stop_blue", "cancel_green"}
    assert gate.deferrable and gate.allowed_owner_dags
