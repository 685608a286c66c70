"""DAG kafka_blue_green end to end with dag.test() (local runner, SQLite metadata DB, a Tansu
broker on 127.0.0.1 started and stopped here): blue reads a 3-partition topic and writes a
running sum to another, input keeps arriving during the whole upgrade, green restores blue's
offsets from the hand-over savepoint, runs fenced until the caught-up gate passes and is
promoted in place; the output topic read with read_committed holds every input record's
result exactly once (0 duplicates, 0 missing against the reference)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime

import pytest
from kafka_server import broker_fixture
from provider_helpers import completed_checkpoints, run_dag, start_job, wait_for, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")

EXAMPLE = "airflow_checkpoint_provider.examples.kafka_sum"
PARTITIONS = 3
NUM_KEYS = 23


def record(i: int) -> dict:
    return {"id": i, "key": f"k{i % NUM_KEYS}", "value": (i * 7919 + 13) % 100}


#: a Tansu broker for this module (tests/kafka_server.py)
kafka_broker = broker_fixture(scope="module")


class Feed:
    """Produces records ``start``, ``start+1``, ... to the input topic from a thread, about
    ``rate`` per second, until stopped; ``produced`` is how many it wrote (all acknowledged)."""

    def __init__(self, broker, topic: str, start: int, rate: float) -> None:
        self.broker, self.topic, self.next, self.rate = broker, topic, start, rate
        self.stop_flag = threading.Event()
        self.error: list = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop_flag.is_set():
                n = max(1, int(self.rate / 10))
                self.broker.produce(self.topic, [(i % PARTITIONS, record(i))
                                                 for i in range(self.next, self.next + n)])
                self.next += n
                time.sleep(0.1)
        except Exception as exc:  # noqa: BLE001 - reported by stop()
            self.error.append(exc)

    def stop(self) -> int:
        self.stop_flag.set()
        self.thread.join(60)
        assert not self.error, self.error
        return self.next


def check_output(rows: list[dict], n: int) -> tuple[int, int]:
    """(duplicates, missing) of the output against the reference: every input record 0..n-1
    gave exactly one output record, and per key the counts are 1..n_key and the last sum is
    the key's total."""
    ids = [r["id"] for r in rows]
    duplicates = len(ids) - len(set(ids))
    missing = len(set(range(n)) - set(ids))
    if duplicates or missing:
        seen: dict[int, list[str]] = defaultdict(list)
        for r in rows:
            seen[r["id"]].append(r["version"])
        twice = sorted(i for i, v in seen.items() if len(v) > 1)
        raise AssertionError(
            f"{duplicates} duplicates (ids {twice[:5]}..{twice[-5:]}, versions "
            f"{sorted({tuple(seen[i]) for i in twice})}), {missing} missing (ids "
            f"{sorted(set(range(n)) - set(ids))[:10]}) of {n}")
    per_key: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        per_key[r["key"]].append(r)
    for key, got in per_key.items():
        want = [i for i in range(n) if record(i)["key"] == key]
        assert sorted(r["count"] for r in got) == list(range(1, len(got) + 1)), key
        last = max(got, key=lambda r: r["count"])
        assert last["sum"] == sum(record(i)["value"] for i in want), key
    return duplicates, missing


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
    suffix = uuid.uuid4().hex[:8]
    in_topic = kafka_broker.create_topic(f"orders-{suffix}", PARTITIONS)
    out_topic = kafka_broker.create_topic(f"sums-{suffix}", PARTITIONS)
    monkeypatch.setenv("CKPT_KAFKA_BOOTSTRAP", kafka_broker.bootstrap)
    monkeypatch.setenv("CKPT_KAFKA_INPUT", in_topic)
    monkeypatch.setenv("CKPT_KAFKA_OUTPUT", out_topic)
    # each output partition gets the transactions of one sink subtask (of blue, then of
    # green): Tansu can wedge a partition several producers commit to concurrently, or show
    # an aborted transaction's records (tests/engine/connectors/kafka/tansu_transactions.py)
    monkeypatch.setenv("CKPT_KAFKA_PARTITIONER", "fixed")
    monkeypatch.setenv("CKPT_EXAMPLE_INTERVAL_MS", "300")
    kafka_broker.produce(in_topic, [(i % PARTITIONS, record(i)) for i in range(1500)])
    blue = start_job(metadata_url, tmp_path, pipeline=f"{EXAMPLE}:build_v1",
                     job_name="kafka-sum-blue")
    wait_for(lambda: completed_checkpoints(store, blue), 60, "a checkpoint of blue")
    feed = Feed(kafka_broker, in_topic, 1500, rate=200)  # input arrives during the upgrade
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

    # the input stopped: green reads to its end, and a checkpoint triggered after that says
    # lag 0 (every record read before its barrier: in its epoch, published on completion)
    from airflow_checkpoint_provider.engine.client import checkpoint_consumer_lag

    def drained():
        return [c for c in completed_checkpoints(store, green) if c.trigger_time > stopped
                and (lag := checkpoint_consumer_lag(c)) is not None and lag.total == 0]
    last = wait_for(drained, 60, "green to read the whole input")[-1]
    wait_for(lambda: [c for c in completed_checkpoints(store, green)
                      if c.checkpoint_id > last.checkpoint_id], 30,
             "one more checkpoint of green (the epoch before it published)")
    rows = kafka_broker.read(out_topic, PARTITIONS, expect=n, settle_s=2.0, timeout=60)
    duplicates, missing = check_output(rows, n)
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
