"""What the Kafka DAG tests (kafka_blue_green, the savepoint upgrade on examples.kafka_sum)
share: the input records and their reference, a feed producing input during the upgrade,
the first job started on a fresh pair of topics, and the output read back once the last
job has read the whole input."""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass

from provider_helpers import completed_checkpoints, start_job, wait_for

EXAMPLE = "airflow_checkpoint_provider.examples.kafka_sum"
PARTITIONS = 3
NUM_KEYS = 23


def record(i: int) -> dict:
    return {"id": i, "key": f"k{i % NUM_KEYS}", "value": (i * 7919 + 13) % 100}


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


@dataclass
class KafkaSumRun:
    """The first job of an upgrade on fresh topics, with input arriving (``feed``)."""

    in_topic: str
    out_topic: str
    job_id: str
    feed: Feed


def start_kafka_sum(kafka_broker, monkeypatch, metadata_url: str, store, tmp_path, *,
                    job_name: str, what: str) -> KafkaSumRun:
    """Fresh input and output topics for the example's environment, records 0..1499 in the
    input, ``job_name`` (``build_v1``) started and checkpointed once, then a feed producing
    records from 1500 on at about 200 a second (the input arrives during the upgrade)."""
    suffix = uuid.uuid4().hex[:8]
    in_topic = kafka_broker.create_topic(f"orders-{suffix}", PARTITIONS)
    out_topic = kafka_broker.create_topic(f"sums-{suffix}", PARTITIONS)
    monkeypatch.setenv("CKPT_KAFKA_BOOTSTRAP", kafka_broker.bootstrap)
    monkeypatch.setenv("CKPT_KAFKA_INPUT", in_topic)
    monkeypatch.setenv("CKPT_KAFKA_OUTPUT", out_topic)
    # each output partition gets the transactions of one sink subtask (of the first job,
    # then of the next): Tansu can wedge a partition several producers commit to
    # concurrently, or show an aborted transaction's records
    # (tests/support/tansu_transactions.py)
    monkeypatch.setenv("CKPT_KAFKA_PARTITIONER", "fixed")
    monkeypatch.setenv("CKPT_EXAMPLE_INTERVAL_MS", "300")
    kafka_broker.produce(in_topic, [(i % PARTITIONS, record(i)) for i in range(1500)])
    job_id = start_job(metadata_url, tmp_path, pipeline=f"{EXAMPLE}:build_v1", job_name=job_name)
    wait_for(lambda: completed_checkpoints(store, job_id), 60, f"a checkpoint of {what}")
    feed = Feed(kafka_broker, in_topic, 1500, rate=200)
    return KafkaSumRun(in_topic, out_topic, job_id, feed)


def drained_output(kafka_broker, store, job_id: str, out_topic: str, stopped, n: int,
                   what: str) -> tuple[list[dict], int, int]:
    """Once the input stopped (at ``stopped``, ``n`` records): the output topic's rows read
    ``read_committed`` with their (duplicates, missing) against the reference, after job
    ``job_id`` read to the input's end. A checkpoint triggered after ``stopped`` says lag 0
    (every record read before its barrier: in its epoch, published on completion), and one
    more checkpoint completes (the epoch before it published)."""
    from airflow_checkpoint_provider.engine.client import checkpoint_consumer_lag

    def drained():
        return [c for c in completed_checkpoints(store, job_id) if c.trigger_time > stopped
                and (lag := checkpoint_consumer_lag(c)) is not None and lag.total == 0]
    last = wait_for(drained, 60, f"{what} to read the whole input")[-1]
    wait_for(lambda: [c for c in completed_checkpoints(store, job_id)
                      if c.checkpoint_id > last.checkpoint_id], 30,
             f"one more checkpoint of {what} (the epoch before it published)")
    rows = kafka_broker.read(out_topic, PARTITIONS, expect=n, settle_s=2.0, timeout=60)
    duplicates, missing = check_output(rows, n)
    return rows, duplicates, missing
