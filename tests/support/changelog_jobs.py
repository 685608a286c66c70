"""Changelogs over Kafka: a seeded history of row changes of an ``items`` table written to a
3-partition topic as Debezium JSON events (partition = id % 3, so each row's events stay in
order), the job that reads them as a changelog into an upsert topic of the rows (key id) and
a retracting aggregate per category into an upsert topic (key cat), and the reference: the
final table and its GROUP BY, computed from the same history."""

from __future__ import annotations

import json
import os
import random
import uuid

from cdc_pipelines import PassThrough
from pipelines import TEST_RESTARTS

from airflow_checkpoint_provider.engine import CheckpointConfig, Pipeline, RestartStrategy
from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSource, UpsertKafkaSink

CATEGORIES = 7
SOURCE = {"connector": "postgresql", "db": "shop", "schema": "public", "table": "items"}


def history(events: int, ids: int, seed: int = 52) -> tuple[list[tuple[int, bytes | None]], dict]:
    """``[(partition, Debezium event or None for a tombstone)]`` and the final table
    ``{id: row}``: a snapshot (``r``) of half the ids, then creates, updates (that may move a
    row to another category) and deletes (each followed by its tombstone); half the events
    carry the schema envelope."""
    rng = random.Random(seed)
    table: dict[int, dict] = {}
    out: list[tuple[int, bytes | None]] = []

    def emit(op: str, before: dict | None, after: dict | None, key: int) -> None:
        payload = {"before": before, "after": after, "op": op, "source": SOURCE, "ts_ms": 1}
        if rng.random() < 0.5:
            payload = {"schema": {"type": "struct", "optional": False}, "payload": payload}
        out.append((key % 3, json.dumps(payload).encode()))

    def row(i: int) -> dict:
        return {"id": i, "cat": f"c{rng.randrange(CATEGORIES)}", "amount": rng.randrange(1, 100)}

    for i in range(0, ids, 2):
        table[i] = row(i)
        emit("r", None, table[i], i)
    while len(out) < events:
        i = rng.randrange(ids)
        if i not in table:
            table[i] = row(i)
            emit("c", None, table[i], i)
        elif rng.random() < 0.25:
            emit("d", table.pop(i), None, i)
            out.append((i % 3, None))  # Debezium's tombstone after a delete
        else:
            before, after = table[i], {**row(i), "id": i}
            if rng.random() < 0.5:
                after["cat"] = before["cat"]
            table[i] = after
            emit("u", before, after, i)
    return out, table


def grouped(table: dict) -> dict[str, dict]:
    """The GROUP BY cat of the final table, as the aggregate's rows."""
    out: dict[str, dict] = {}
    for r in table.values():
        g = out.setdefault(r["cat"], {"cat": r["cat"], "n": 0, "total": 0})
        g["n"] += 1
        g["total"] += r["amount"]
    return out


def make_input(broker, events: int, ids: int) -> tuple[str, dict, dict]:
    """The Debezium topic, its ``stop_at`` and the final table."""
    from confluent_kafka import Producer

    topic = broker.create_topic(f"dbz-{uuid.uuid4().hex[:8]}", 3)
    rows, table = history(events, ids)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "log_level": 3})
    counts = {p: 0 for p in range(3)}
    for partition, value in rows:
        producer.produce(topic, value, key=None, partition=partition)
        counts[partition] += 1
        producer.poll(0)
    assert producer.flush(30) == 0
    return topic, {(topic, p): n for p, n in counts.items()}, table


def changelog_job(root: str, bootstrap: str, in_topic: str, stop_at: dict, rows_topic: str,
                  agg_topic: str, *, name: str = "kafka-changelog", parallelism: int = 2,
                  kill_after: int | None = None, delay_s: float = 0.0,
                  interval_ms: int = 150, sink_parallelism: int = 1) -> Pipeline:
    """Debezium topic -> key_by(id) pass-through (SIGKILLs its slot after ``kill_after``
    records, once) -> the rows' upsert topic, and -> key_by(cat).aggregate(n=count,
    total=sum(amount), emit="upsert") -> the aggregate's upsert topic; everything at
    ``parallelism`` but the two upsert sinks, at ``sink_parallelism``: 1 gives each upsert
    topic's partitions the transactions of one transactional.id. ``UpsertKafkaSink`` writes
    by key (no ``partitioner="fixed"``), so at 2 both subtasks commit on every partition at
    once, which can wedge the test broker's partitions (Tansu 0.6; CHAOS.md FINDINGS 10)."""
    p = Pipeline(name, max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms,
                                             directory=os.path.join(root, "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    rows = (p.source(KafkaSource(bootstrap, topics=[in_topic], stop_at=stop_at,
                                 value_format="debezium-json"), uid="dbz-in", parallelism=parallelism)
             .key_by("id")
             .process(PassThrough(kill_after, os.path.join(root, "killed"), delay_s), uid="pass",
                      parallelism=parallelism))
    rows.key_by("id").sink(UpsertKafkaSink(bootstrap, rows_topic, key="id"), uid="rows-out",
                           parallelism=sink_parallelism)
    (rows.key_by("cat")
         .aggregate(uid="per-cat", parallelism=parallelism, emit="upsert", n="count",
                    total=("sum", "amount"))
         .key_by("cat")
         .sink(UpsertKafkaSink(bootstrap, agg_topic, key="cat"), uid="agg-out",
               parallelism=sink_parallelism))
    return p


def compacted(broker, topic: str, partitions: int = 3) -> tuple[dict, int]:
    """The topic read with read_committed and compacted by key (the last value per key; a
    tombstone removes the key), and the number of records read. Each key is on one
    partition, which the reader returns in offset order."""
    table: dict = {}
    records = broker.read(topic, partitions, settle_s=1.0, timeout=30, raw=True)
    for _offset, key, value in records:
        k = json.loads(key)
        if value is None:
            table.pop(tuple(k.values()), None)
        else:
            table[tuple(k.values())] = json.loads(value)
    return table, len(records)


def check_output(broker, rows_topic: str, agg_topic: str, table: dict) -> None:
    rows, _ = compacted(broker, rows_topic)
    assert rows == {(i,): r for i, r in table.items()}, _diff(rows, {(i,): r for i, r in table.items()})
    agg, _ = compacted(broker, agg_topic)
    expected = {(c,): g for c, g in grouped(table).items()}
    assert agg == expected, _diff(agg, expected)


def _diff(got: dict, want: dict) -> str:
    missing = sorted(set(want) - set(got))[:5]
    extra = sorted(set(got) - set(want))[:5]
    wrong = [(k, got[k], want[k]) for k in sorted(set(got) & set(want)) if got[k] != want[k]][:5]
    return f"{len(got)} keys vs {len(want)}: missing {missing}, extra {extra}, different {wrong}"
