"""Three behaviours of the test broker's transaction coordinator (Tansu 0.6.0, the memory
storage engine ``dynostore``) that Apache Kafka does not have, shown with plain
confluent-kafka clients and no engine code. They explain the two exactly-once failures of
issue 52 that full-suite runs saw; ``KafkaSink``'s module docstring lists them as broker
caveats. Run by hand (it starts and stops its own broker on 127.0.0.1):

    .venv/bin/python tests/support/tansu_transactions.py deferred
    TOKIO_WORKER_THREADS=8 .venv/bin/python tests/support/tansu_transactions.py wedge

``deferred`` (deterministic): producer B commits a transaction (records + an offset commit,
the sink's commit marker) while producer A's transaction on the same partition is open.
B's ``commit_transaction`` returns, yet B's offset commit stays unapplied until A ends (Tansu
completes a commit only when no overlapping transaction of that partition is open:
``txn_end`` in ``tansu-storage/src/dynostore.rs`` leaves it ``PrepareCommit`` otherwise).
A restore that reads B's marker in that window publishes B's epoch again: duplicates. Then
A's producer dies and A's transactional.id is initialized again (a restore fences it): A is
aborted, B's offset commit is applied at that moment, and A's aborted record is still
returned to a ``read_committed`` consumer (no aborted-transaction index in Fetch answers).
Printed on this machine:

    B committed, A open: B's offset commit = -1001     (Apache Kafka: 7)
    A aborted by the re-initialization: B's offset commit = 7
    read_committed: [b'a', b'b']                       (Apache Kafka: [b'b'])

``wedge`` (a race inside the broker: it needs preemption between the broker's own tasks,
so more tokio worker threads than cores, or a loaded machine): rounds of K producers
committing concurrently on one partition (the K subtasks of a sink publishing one
checkpoint), each round followed by a probe producer's lone commit. (How, as we read
``txn_end``: a concurrent EndTxn can complete another producer's prepared transaction
between that producer's EndTxn steps; its own commit marker is then written into a
transaction already completed, which keeps a "committed" entry with a record range that
every later commit on the partition waits for. What is shown is the behaviour.)
The probe's commit then stays invisible (and its offset commit unapplied) until the racing
producer commits again; once the producers are replaced (a stop with savepoint and a
restore: the same transactional.ids initialized again, as ``KafkaSink.recover`` does),
nothing committed on that partition ever becomes visible. Printed on this machine (3 of 3
runs, wedged after rounds 3, 70 and 223):

    round 3: the probe's commit_transaction returned, but after 1 s its offset commit is
      not applied: markers [3, 3, 3, 3, 3, 3, 2]
    after re-initializing the 7 transactional.ids and one more committed round (+5 s):
      read_committed 182, read_uncommitted 244 of 244; markers [3, 3, 3, 3, 3, 3, 2]

The wedge shows what the savepoint hand-over failure showed (read_committed stopped at the
first job's output, every record present read_uncommitted). The rescaled driver-kill
duplicates were, in the runs caught with the sink's log, aborted records (the failover
SIGKILLed publishes in flight); the deferred commit is a second way to duplicates (a
restore reads the marker as missing). ``KafkaSink(partitioner="fixed")`` gives each
partition the transactions of one transactional.id, which avoids deferral and wedge; no
client setting hides aborted records on this broker.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/support/

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from kafka_server import TansuBroker  # noqa: E402


def _consumer(broker: TansuBroker, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "enable.auto.commit": False, "isolation.level": "read_committed",
                     "log_level": 3})


def _producer(broker: TansuBroker, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid,
                  "linger.ms": 0, "log_level": 3})
    p.init_transactions(15)
    return p


def _marker(consumer: Consumer, topic: str) -> int:
    return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset


def deferred(broker: TansuBroker) -> None:
    topic = broker.create_topic(f"deferred-{uuid.uuid4().hex[:6]}")
    markers = broker.create_topic(f"markers-{topic}")
    group = _consumer(broker, f"g-{topic}")
    a = _producer(broker, f"a-{topic}")
    a.begin_transaction()
    a.produce(topic, b"a")
    a.flush(15)  # A: open, with a record on the partition
    b = _producer(broker, f"b-{topic}")
    b.begin_transaction()
    b.produce(topic, b"b")
    b.flush(15)
    b.send_offsets_to_transaction([TopicPartition(markers, 0, 7)],
                                  group.consumer_group_metadata(), 15)
    b.commit_transaction(15)  # returned: committed, as far as the client can tell
    time.sleep(1.0)
    print(f"B committed, A open: B's offset commit = {_marker(group, markers)}"
          "     (Apache Kafka: 7)")
    del a  # A's publisher dies with its transaction open
    gc.collect()
    _producer(broker, f"a-{topic}")  # a restore initializes A's transactional.id: A aborted
    time.sleep(0.5)
    print(f"A aborted by the re-initialization: B's offset commit = {_marker(group, markers)}")
    rows = [v for _, _, v in broker.read(topic, raw=True, expect=2, timeout=3, settle_s=0.3)]
    print(f"read_committed: {rows}                       (Apache Kafka: [b'b'])")
    group.close()


def wedge(broker: TansuBroker, max_rounds: int = 500, k: int = 6) -> None:
    topic = broker.create_topic(f"wedge-{uuid.uuid4().hex[:6]}")
    markers = broker.create_topic(f"markers-{topic}")
    groups = [_consumer(broker, f"g-{topic}-{i}") for i in range(k + 1)]
    producers = [_producer(broker, f"tid-{topic}-{i}") for i in range(k + 1)]  # k: the probe
    produced = 0

    def publish(i: int, r: int, n: int = 10) -> None:
        p = producers[i]
        p.begin_transaction()
        for j in range(n):
            p.produce(topic, json.dumps({"p": i, "r": r, "j": j}).encode())
        p.flush(15)
        p.send_offsets_to_transaction([TopicPartition(markers, 0, r)],
                                      groups[i].consumer_group_metadata(), 15)
        p.commit_transaction(15)

    def one_round(r: int) -> bool:
        nonlocal produced
        threads = [threading.Thread(target=publish, args=(i, r)) for i in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        publish(k, r, 1)
        produced += 10 * k + 1
        deadline = time.monotonic() + 1.0
        while _marker(groups[k], markers) != r and time.monotonic() < deadline:
            time.sleep(0.05)
        return _marker(groups[k], markers) == r

    def state() -> list[int]:
        return [_marker(g, markers) for g in groups]

    r = 0
    while True:
        r += 1
        if r > max_rounds:
            print(f"no wedge in {max_rounds} rounds (set TOKIO_WORKER_THREADS=8 or load the "
                  "machine: the race needs preemption inside the broker)")
            return
        if not one_round(r):
            print(f"round {r}: the probe's commit_transaction returned, but after 1 s its "
                  f"offset commit is not applied: markers {state()}")
            break
    producers.clear()  # a stop with savepoint: every producer gone
    gc.collect()
    producers.extend(_producer(broker, f"tid-{topic}-{i}") for i in range(k + 1))  # a restore
    r += 1
    one_round(r)
    time.sleep(5)
    visible = len(broker.read(topic, expect=produced, settle_s=0.3, timeout=3))
    raw = len(broker.read(topic, expect=produced, settle_s=0.3, timeout=3,
                          isolation="read_uncommitted"))
    print(f"after re-initializing the {k + 1} transactional.ids and one more committed round "
          f"(+5 s): read_committed {visible}, read_uncommitted {raw} of {produced}; markers "
          f"{state()} (every commit_transaction returned; expected {r})")


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "deferred"
    server = TansuBroker().start()
    try:
        deferred(server) if which == "deferred" else wedge(server)
    finally:
        server.stop()
