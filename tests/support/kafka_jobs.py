"""The Kafka -> keyed running sum -> Kafka job of the Kafka tests, its input, its expected
output (the failure-free reference, computed) and the check of a topic against it.

``partitioner="fixed"`` with an output topic of ``OUT_PARTITIONS`` partitions: each sink
subtask's transactions go to a partition of their own. The tests of a restore at another
parallelism and of a hand-over use it: the test broker (Tansu 0.6) mishandles concurrent
transactions of several producers on one partition (a commit stays invisible, its marker
unapplied, while another is open; a race can wedge the partition for good once the
producers are replaced: ``tansu_transactions.py``), which Apache Kafka does not."""

from __future__ import annotations

import os
import uuid
from collections import Counter, defaultdict

from pipelines import TEST_RESTARTS, FaultPlan, RunningSum, check_exactly_once_rows

from airflow_checkpoint_provider.engine import CheckpointConfig, Pipeline, RestartStrategy
from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSink, KafkaSource

NUM_KEYS = 23
#: the FaultPlan point ``("kill", KILL_AT_FIRST_SNAPSHOT)``: SIGKILL the slot of the first
#: RunningSum that snapshots a checkpoint (record ids are >= 0, so no record fires it)
KILL_AT_FIRST_SNAPSHOT = -1
#: output partitions of the tests that give each sink subtask its own (parallelism <= 3)
OUT_PARTITIONS = 3


def record(i: int) -> dict:
    return {"id": i, "key": f"k{i % NUM_KEYS}", "value": (i * 7919 + 13) % 100}


def make_input(broker, n: int, partitions: int = 3) -> tuple[str, dict]:
    """A topic of ``partitions`` partitions holding records 0..n-1 (record i in partition
    i % partitions); its ``stop_at`` (every partition's end offset)."""
    topic = broker.create_topic(f"in-{uuid.uuid4().hex[:8]}", partitions)
    counts = broker.produce(topic, [(i % partitions, record(i)) for i in range(n)])
    return topic, {(topic, p): counts.get(p, 0) for p in range(partitions)}


class SnapshotKillingSum(RunningSum):
    """RunningSum whose slot is SIGKILLed in the synchronous part of the first checkpoint
    ``>= from_checkpoint`` it snapshots, if the fault plan has ``("kill",
    KILL_AT_FIRST_SNAPSHOT)``. From 1: a checkpoint is triggered only once every task runs,
    so every sink finished ``recover`` by then, and none of the job's own checkpoints
    completed: no publish is in flight anywhere when the slot dies. (A kill during another
    slot's publish leaves records that Tansu, the test broker, shows although aborted:
    tansu_transactions.py 'deferred'.) Later: the other slots published the previous epoch
    before they took this barrier, unless a publish outlasts the checkpoint interval."""

    from_checkpoint = 1

    def snapshot_state(self, checkpoint_id):
        if self.faults and checkpoint_id >= self.from_checkpoint:
            self.faults.maybe_fail("kill", KILL_AT_FIRST_SNAPSHOT, self._info())
        super().snapshot_state(checkpoint_id)


class ThirdSnapshotKillingSum(SnapshotKillingSum):
    """:class:`SnapshotKillingSum` from checkpoint 3: epochs were published before."""

    from_checkpoint = 3


def expected_sums(n: int) -> dict[str, dict]:
    per_key: dict[str, dict] = defaultdict(lambda: {"ids": set(), "sum": 0})
    for i in range(n):
        r = record(i)
        per_key[r["key"]]["ids"].add(i)
        per_key[r["key"]]["sum"] += r["value"]
    return dict(per_key)


def running_sum_job(root: str, broker, in_topic: str, stop_at: dict, out_topic: str, *,
                    name: str = "kafka-sum", parallelism: int = 2,
                    faults: FaultPlan | None = None, delay_s: float = 0.0,
                    interval_ms: int = 100, delivery: str = "exactly_once",
                    partitioner: str = "key", function: type[RunningSum] = RunningSum,
                    ) -> Pipeline:
    p = Pipeline(name, max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms,
                                             directory=os.path.join(root, "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    (p.source(KafkaSource(broker.bootstrap, topics=[in_topic], stop_at=stop_at),
              uid="kafka-in", parallelism=parallelism)
      .key_by("key")
      .process(function(faults, delay_s), uid="sum", parallelism=parallelism)
      .sink(KafkaSink(broker.bootstrap, out_topic, key="key", delivery=delivery,
                      partitioner=partitioner),
            uid="kafka-out", parallelism=parallelism))
    return p


def check_output(broker, out: str, n: int, partitions: int = 1) -> None:
    """The read_committed output (of the topic's ``partitions``) equals the reference; else
    what the topic holds."""
    rows = broker.read(out, partitions, expect=n)
    if len(rows) != n:
        raw = broker.read(out, partitions, settle_s=0.5, timeout=10,
                          isolation="read_uncommitted")
        raise AssertionError(f"{len(rows)} of {n} rows read_committed; read_uncommitted: "
                             f"{len(raw)} rows, {len({r['id'] for r in raw})} distinct ids")
    try:
        check_exactly_once_rows(rows, expected_sums(n))
    except AssertionError as exc:  # which counts repeat or are missing, and their rows
        key = str(exc).split(":")[0].removeprefix("key ")
        mine = [r for r in rows if r["key"] == key]
        seen = Counter(r["count"] for r in mine)
        twice = sorted(c for c, k in seen.items() if k > 1)
        missing = [c for c in range(1, len(mine) + 1) if c not in seen]
        raise AssertionError(
            f"{exc}; {len(mine)} rows of {key}: counts repeated {twice[:10]}, missing "
            f"{missing[:10]}; rows of the first repeated count: "
            f"{[r for r in mine if twice and r['count'] == twice[0]]}") from None
