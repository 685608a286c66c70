"""What the broker holds after a Kafka run that differed (issue 52, chaos FINDINGS 8 and 10):
is a committed transaction not visible (the test broker), or did the sink not publish?

:func:`broker_state` reads the run's output topics with ``read_committed`` and with
``read_uncommitted`` (per partition: records, last offset), reads the sink's commit markers
(the committed offset of each marker group on the marker topic: the last epoch each sink
subtask of each job published), and then probes each output partition: a fresh
transactional producer commits one tombstone there and a ``read_committed`` consumer waits
for it. A probe that stays invisible proves the partition wedged by the broker itself
(whatever our sink did before, a new producer's committed transaction must become visible
on Apache Kafka); records present ``read_uncommitted`` but not ``read_committed`` with the
job FINISHED (every publish's ``commit_transaction`` returned) are committed transactions
the broker does not show. Records missing from both are records the sink never published.

Run after the comparison (the probes write to the topics)."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

#: the sinks' marker topic and transactional.id prefix (KafkaSink's defaults, which the
#: cells' jobs use)
MARKER_TOPIC = "_ckpt_sink_commits"
PREFIX = "ckpt"
#: how long a probe's commit may take to become visible before its partition counts as
#: wedged (Apache Kafka: milliseconds; Tansu: as soon as no transaction on it is open)
PROBE_WAIT_S = 5.0


def read_partitions(
    bootstrap: str,
    topic: str,
    partitions: int,
    isolation: str,
    *,
    expect: int | None = None,
    settle_s: float = 1.5,
    timeout: float = 30.0,
) -> list[tuple]:
    """Every record of ``topic`` read with ``isolation``, as ``(partition, offset, key,
    value)``: once some (at least ``expect``) arrived and nothing new for ``settle_s``, or
    at ``timeout`` (the broker's high watermarks are wrong: they cannot say where the end
    is)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-dump-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple] = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=0.1):
                if m.error() is None:
                    out.append((m.partition(), m.offset(), m.key(), m.value()))
                    last = time.monotonic()
            if out and len(out) >= (expect or 0) and time.monotonic() - last > settle_s:
                break
    finally:
        consumer.close()
    return out


def read_committed(
    bootstrap: str, topic: str, partitions: int, *, expect: int | None = None
) -> tuple[list[tuple], int]:
    """``topic`` as Apache Kafka's ``read_committed`` consumers see it: the test broker's
    ``read_committed`` answer without the records of aborted transactions, which it returns
    (its caveat (1); each partition's log read batch by batch, :mod:`.kafka_log`). Returns
    the records ``(partition, offset, key, value)`` and how many were dropped."""
    from .kafka_log import aborted_offsets, partition_log

    records = read_partitions(bootstrap, topic, partitions, "read_committed", expect=expect)
    aborted = {p: aborted_offsets(partition_log(bootstrap, topic, p)) for p in range(partitions)}
    kept = [r for r in records if r[1] not in aborted[r[0]]]
    return kept, len(records) - len(kept)


def compact(records: list[tuple]) -> dict:
    """The last value per key (a tombstone removes the key), in each partition's order, as
    ``changelog_jobs.compacted`` reads an upsert topic: ``{(key values): row}``."""
    table: dict = {}
    for _p, _o, key, value in sorted(records, key=lambda r: (r[0], r[1])):
        k = tuple(json.loads(key).values())
        if value is None:
            table.pop(k, None)
        else:
            table[k] = json.loads(value)
    return table


def per_partition(records: list[tuple], partitions: int) -> dict[int, dict]:
    count = Counter(r[0] for r in records)
    last: dict[int, int] = {}
    for p, o, _k, _v in records:
        last[p] = max(last.get(p, -1), o)
    return {
        p: {"records": count.get(p, 0), "last_offset": last.get(p, -1)} for p in range(partitions)
    }


def markers(
    bootstrap: str, job_name: str, uids: list[str], subtasks: int, job_ids: list[str]
) -> dict[str, int]:
    """``{"<uid>/<subtask>/<job id>": last published epoch (-1: none)}``: the committed
    offset of each sink subtask's marker group (``KafkaSink``'s ``_marker_group``)."""
    from confluent_kafka import Consumer, TopicPartition

    out: dict[str, int] = {}
    for uid in uids:
        for subtask in range(subtasks):
            for job in job_ids:
                group = f"{PREFIX}-{job_name}-{uid}-{subtask}-{job}"
                c = Consumer(
                    {
                        "bootstrap.servers": bootstrap,
                        "group.id": group,
                        "enable.auto.commit": False,
                        "isolation.level": "read_committed",
                        "log_level": 3,
                    }
                )
                try:
                    tp = c.committed([TopicPartition(MARKER_TOPIC, 0)], timeout=10)[0]
                    out[f"{uid}/{subtask}/{job[:8]}"] = tp.offset if tp.offset >= 0 else -1
                finally:
                    c.close()
    return out


def reinitialize(bootstrap: str, job_name: str, uids: list[str], subtasks: int) -> list[str]:
    """``init_transactions`` with each transactional.id the sinks used (``KafkaSink``'s
    ``<prefix>-<job name>-<uid>-<subtask>``): the coordinator aborts whatever transaction
    one of them left open (the job has ended: nothing live is fenced). Afterwards no
    transaction of the run is open: on Apache Kafka nothing then holds a partition's last
    stable offset back. The transactional.ids, in order."""
    from confluent_kafka import Producer

    tids = []
    for uid in uids:
        for subtask in range(subtasks):
            tid = f"{PREFIX}-{job_name}-{uid}-{subtask}"
            p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "log_level": 3})
            p.init_transactions(15)
            p.flush(5)
            tids.append(tid)
    return tids


def probe(bootstrap: str, topic: str, partitions: int) -> dict[int, float | None]:
    """Commit one tombstone per partition in a fresh producer's transaction; per partition
    the seconds until a ``read_committed`` consumer saw it (``None``: not within
    :data:`PROBE_WAIT_S`: the partition is wedged)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    key = json.dumps({"__chaos_probe__": uuid.uuid4().hex[:8]}).encode()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "log_level": 3,
            "linger.ms": 0,
            "transactional.id": f"chaos-probe-{uuid.uuid4().hex[:8]}",
        }
    )
    producer.init_transactions(15)
    producer.begin_transaction()
    for p in range(partitions):
        producer.produce(topic, None, key, partition=p)
    producer.flush(15)
    producer.commit_transaction(15)
    t0 = time.monotonic()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-probe-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[int, float | None] = {p: None for p in range(partitions)}
    try:
        while time.monotonic() - t0 < PROBE_WAIT_S and None in seen.values():
            for m in consumer.consume(1000, timeout=0.1):
                if m.error() is None and m.key() == key and seen[m.partition()] is None:
                    seen[m.partition()] = round(time.monotonic() - t0, 2)
    finally:
        consumer.close()
    return seen


def broker_state(
    bootstrap: str,
    topics: dict[str, int],
    reference: dict[str, dict | int],
    *,
    job_name: str,
    uids: list[str],
    subtasks: int,
    job_ids: list[str],
) -> dict:
    """The diagnosis of one run (module docstring). ``topics``: output topic -> partitions;
    ``reference``: topic -> the expected compacted table ``{(key values): row}`` (an upsert
    topic) or the number of distinct records expected (an append topic)."""
    out: dict = {"topics": {}, "markers": markers(bootstrap, job_name, uids, subtasks, job_ids)}
    hidden_parts: list[str] = []
    unpublished = False
    for topic, n in topics.items():
        committed = read_partitions(bootstrap, topic, n, "read_committed")
        everything = read_partitions(bootstrap, topic, n, "read_uncommitted")
        t: dict = {
            "read_committed": per_partition(committed, n),
            "read_uncommitted": per_partition(everything, n),
        }
        want = reference[topic]
        for name, recs in (("read_committed", committed), ("read_uncommitted", everything)):
            if isinstance(want, dict):
                got = compact(recs)
                t[f"{name}_vs_reference"] = {
                    "missing": sum(1 for k, v in want.items() if got.get(k) != v),
                    "extra": sum(1 for k, v in got.items() if want.get(k) != v),
                }
            else:  # append: distinct records (duplicates are not losses)
                distinct = len({r[3] for r in recs})
                t[f"{name}_vs_reference"] = {
                    "missing": max(want - distinct, 0),
                    "extra": len(recs) - distinct,
                }
        if t["read_uncommitted_vs_reference"]["missing"]:
            unpublished = True
        for p in range(n):
            if t["read_uncommitted"][p]["records"] > t["read_committed"][p]["records"]:
                hidden_parts.append(f"{topic}[{p}]")
        out["topics"][topic] = t
    # then nothing of the run is left open, and the probes (last: they write to the topics)
    out["reinitialized"] = reinitialize(bootstrap, job_name, uids, subtasks)
    wedged = []
    healed = True
    for topic, n in topics.items():
        seen = probe(bootstrap, topic, n)
        t = out["topics"][topic]
        t["probe_visible_after_s"] = seen
        wedged += [f"{topic}[{p}]" for p, s in seen.items() if s is None]
        want = reference[topic]
        if isinstance(want, dict):
            got = compact(
                [
                    r
                    for r in read_partitions(bootstrap, topic, n, "read_committed")
                    if b"__chaos_probe__" not in r[2]
                ]
            )
            t["read_committed_after_probe_vs_reference"] = after = {
                "missing": sum(1 for k, v in want.items() if got.get(k) != v),
                "extra": sum(1 for k, v in got.items() if want.get(k) != v),
            }
            healed = healed and not any(after.values())
    out["hidden_partitions"] = hidden_parts
    out["wedged_partitions"] = wedged
    if unpublished:
        out["verdict"] = (
            "records missing even read_uncommitted: the sink did not publish "
            "them (not the broker's visibility)"
        )
    elif wedged:
        out["verdict"] = (
            "the broker: every record reached it (read_uncommitted), and after each "
            "transactional.id of the sink was re-initialized (nothing of the run open) a "
            f"fresh transaction committed on {', '.join(wedged)} stays invisible to "
            f"read_committed for {PROBE_WAIT_S:.0f} s: the partition is wedged"
        )
    elif hidden_parts and healed:
        out["verdict"] = (
            f"records visible read_uncommitted only on {', '.join(hidden_parts)} until the "
            "sink's transactional.ids were re-initialized: a transaction of the run was left "
            "open, or a commit deferred behind one"
        )
    else:
        out["verdict"] = "probes visible, every record reached the broker: undetermined"
    return out
