"""The Kafka cells of the chaos matrix (issue 52): cell definitions and their run hooks, for
the chaos runner to include (see "Wiring" below; this module changes nothing by itself).

Pipelines (the ones the Kafka tests run, tests/integration/engine/connectors/kafka/):

* ``kafka-sum``: a 3-partition topic -> ``key_by(key)`` running sum -> ``KafkaSink``
  (exactly once, ``partitioner="fixed"`` into a 3-partition topic: each sink subtask's
  transactions to a partition of its own, as in the Kafka tests), ``kafka_jobs.running_sum_job``. Reference: every input id emitted once,
  each key's counts 1..n, each key's final sum (computed from the input).
* ``kafka-changelog``: Debezium JSON change events on a 3-partition topic -> the rows'
  ``UpsertKafkaSink`` (key id) and a retracting ``aggregate`` per category ->
  ``UpsertKafkaSink`` (key cat): ``changelog_jobs.changelog_job`` with the two upsert sinks
  at parallelism 1 (:func:`changelog_job`; each upsert topic gets the transactions of one
  transactional.id: the upsert sink writes by key, and two subtasks committing on one
  partition at once wedge the test broker's partition, FINDINGS 10). Reference: the final
  table and its GROUP BY (computed from the event history); the topics are read with
  ``read_committed`` and compacted by key.

Both jobs are bounded (``stop_at``): a run ends FINISHED, never cancelled. The broker is a
Tansu (tests/support/kafka_server.py) on 127.0.0.1 started once per harness process and stopped at
exit; every run gets fresh topics. Local and Spark runners (the slots reach the broker on
127.0.0.1: Spark local mode); kills: the runner's (slot / Python worker, driver, Spark JVM).

Broker caveats: Tansu returns the records of a transaction aborted by a crash to
``read_committed`` readers (a SIGKILL of a slot whose sink is in the middle of publishing an
epoch): the output is read as Apache Kafka's ``read_committed`` consumers would see it,
without them (kafka_state.read_committed, from each partition's log with its transaction
markers, kafka_log.py; the record's ``aborted_hidden`` counts them). Its other two caveats
(a commit deferred, a partition wedged, when several producers commit on one partition) are
avoided by the cells' shapes: one transactional.id per output partition. A run that
differs gets the broker's state in its record (kafka_state.broker_state).

How the runner uses them: ``catalogue.CATALOGUE`` includes :data:`KAFKA_ENTRIES`
(``group="kafka"``, ``reference="kafka-reference"``: no failure-free or DuckDB reference
run); ``run.run_one`` takes its hooks from :func:`for_entry` (as for CDC), expects the
hooks' ``final_status`` and compares ``hooks.multisets()``; the entries have no output
directories (``outputs=()``).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import uuid
from collections import Counter

from .cells import TESTS, BuildContext, Entry, configure

#: the Kafka tests' job modules (kafka_jobs, changelog_jobs) are helper modules of TESTS
#: (tests/support, on sys.path: slots inherit it)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

#: input records of ``kafka-sum`` and Debezium events (over ``CHANGELOG_IDS`` rows) of
#: ``kafka-changelog``
SUM_RECORDS = 9_000
CHANGELOG_EVENTS, CHANGELOG_IDS = 6_000, 500

_BROKER = None

#: harness options (``python -m bench.chaos --keep-broker / --broker-threads /
#: --kafka-sum-shape``): keep the broker running after a run that differed (its address and
#: PID printed, stopped by hand); the broker's tokio worker threads (``None``: Tansu's
#: default, one per core; more threads than cores preempt its tasks more often, the
#: condition of its commit race, tests/support/tansu_transactions.py
#: ``wedge``); the kafka-sum sink's partitioner and output partitions (the cell's
#: ``("fixed", 3)``; ``("key", 1)`` is its shape before 374720b, FINDINGS 8)
KEEP_BROKER = False
BROKER_THREADS: int | None = None
SUM_SHAPE: tuple[str, int] = ("fixed", 3)
#: kafka-changelog's upsert sinks' parallelism: 1 (the cell since FINDINGS 10: one
#: transactional.id per upsert topic); 2 is the Kafka tests' shape (a reproduction)
CHANGELOG_SINKS = 1
_KEPT = False


def diagnostic() -> dict | None:
    """The non-default conditions of this harness's Kafka runs (``None``: the cells as
    defined): a run under them is a reproduction, not a run of the matrix's cell."""
    d: dict = {}
    if BROKER_THREADS is not None:
        d["broker_threads"] = BROKER_THREADS
    if SUM_SHAPE != ("fixed", 3):
        d["kafka_sum_shape"] = f"partitioner={SUM_SHAPE[0]}, {SUM_SHAPE[1]} output partition(s)"
    if CHANGELOG_SINKS != 1:
        d["kafka_changelog_sinks"] = CHANGELOG_SINKS
    return d or None


def broker():
    """The harness's Tansu broker (started once, stopped at exit unless kept)."""
    global _BROKER
    if _BROKER is None:
        from kafka_server import TansuBroker

        before = os.environ.get("TOKIO_WORKER_THREADS")
        if BROKER_THREADS is not None:  # the broker inherits this process's environment
            os.environ["TOKIO_WORKER_THREADS"] = str(BROKER_THREADS)
        try:
            _BROKER = TansuBroker().start()
        finally:
            if before is None:
                os.environ.pop("TOKIO_WORKER_THREADS", None)
            else:
                os.environ["TOKIO_WORKER_THREADS"] = before
        atexit.register(_stop_broker)
    return _BROKER


def _stop_broker() -> None:
    if _BROKER is None:
        return
    if _KEPT:
        print(f"Kafka broker kept for inspection: {_BROKER.bootstrap}, pid {_BROKER.proc.pid} "
              f"(log {_BROKER.log_path}); stop it with: kill {_BROKER.proc.pid}", flush=True)
        return
    _BROKER.stop()


def _stop_at(extra: dict) -> dict:
    """``stop_at`` from its JSON form in the spec (``[[topic, partition, end], ...]``)."""
    return {(t, p): end for t, p, end in extra["stop_at"]}


def _kafka_sum(ctx: BuildContext):
    from kafka_jobs import running_sum_job

    x = ctx.extra

    class Broker:
        bootstrap = x["bootstrap"]

    # each sink subtask's transactions to a partition of its own, as the Kafka tests do:
    # the test broker mishandles concurrent transactions of several producers on one
    # partition (a commit's marker deferred while another publish is open, which a restore
    # reads as unpublished: duplicates), which Apache Kafka does not (kafka_jobs.py)
    return configure(
        running_sum_job(ctx.root, Broker, x["in"], _stop_at(x), x["out"], name="chaos-kafka-sum",
                        faults=ctx.fault_plan(), delay_s=0.0005, interval_ms=250,
                        partitioner=x.get("partitioner", "fixed")),
        ctx,
    )


def _kafka_changelog(ctx: BuildContext):
    # its upsert sinks at parallelism 1 (sink_parallelism): UpsertKafkaSink writes by key, and
    # two subtasks committing on one partition at once can wedge the test broker's partition
    # (FINDINGS 10); --kafka-changelog-sinks 2 runs that shape as a reproduction
    from changelog_jobs import changelog_job

    x = ctx.extra
    return configure(
        changelog_job(ctx.root, x["bootstrap"], x["in"], _stop_at(x), x["rows"], x["agg"],
                      name="chaos-kafka-changelog", delay_s=0.0003, interval_ms=250,
                      sink_parallelism=x.get("sink_parallelism", 1)),
        ctx,
    )


KAFKA_ENTRIES = [
    Entry("kafka-sum", "kafka", _kafka_sum, (), "kafka-reference", SUM_RECORDS, 4.0,
          runners=("local", "spark")),
    # no raise points (records=0): its pass-through only SIGKILLs; the harness's kills do
    Entry("kafka-changelog", "kafka", _kafka_changelog, (), "kafka-reference", 0, 4.0,
          runners=("local", "spark")),
]


class KafkaHooks:
    """:func:`.run._drive`'s hooks for one Kafka run: fresh topics and their input before
    the job starts (``extra``: the build's spec fields), the committed output against the
    reference afterwards (:meth:`multisets`)."""

    #: the status of a run that went to its end (bounded jobs finish)
    final_status = "FINISHED"

    def __init__(self, pipeline: str, root: str) -> None:
        self.pipeline = pipeline
        self.root = root
        self.broker = broker()
        b = self.broker
        if pipeline == "kafka-sum":
            from kafka_jobs import make_input

            in_topic, stop_at = make_input(b, SUM_RECORDS)
            partitioner, self.out_partitions = SUM_SHAPE
            out = b.create_topic(f"out-{in_topic}", self.out_partitions)
            self.extra = {"bootstrap": b.bootstrap, "in": in_topic, "out": out,
                          "partitioner": partitioner}
        else:
            from changelog_jobs import make_input

            in_topic, stop_at, self.table = make_input(b, CHANGELOG_EVENTS, CHANGELOG_IDS)
            self.extra = {"bootstrap": b.bootstrap, "in": in_topic,
                          "rows": b.create_topic(f"rows-{in_topic}", 3),
                          "agg": b.create_topic(f"agg-{in_topic}", 3),
                          "sink_parallelism": CHANGELOG_SINKS}
        self.extra["stop_at"] = [[t, p, end] for (t, p), end in sorted(stop_at.items())]
        self.extra["run"] = uuid.uuid4().hex[:8]
        #: topic -> records of aborted transactions the broker returned to read_committed
        #: (dropped from the comparison, in the run's record)
        self.aborted_hidden: dict[str, int] = {}

    def on_running(self) -> None:
        pass

    def diagnostic(self) -> dict | None:
        return diagnostic()

    def ready_to_stop(self) -> bool:
        return False  # a bounded job: it finishes by itself

    def _read_committed(self, topic: str, partitions: int, expect: int | None = None) -> list:
        """``topic`` as Apache Kafka's ``read_committed`` consumers see it (kafka_state.py:
        the test broker also returns the records of aborted transactions, which are
        dropped here and counted in :attr:`aborted_hidden`)."""
        from .kafka_state import read_committed

        records, dropped = read_committed(self.broker.bootstrap, topic, partitions,
                                          expect=expect)
        if dropped:
            self.aborted_hidden[topic] = dropped
        return records

    def multisets(self) -> tuple[Counter, Counter]:
        """(committed, reference) as multisets: ``kafka-sum``: (key, id) per emission,
        (key, "count", n) per count, (key, "final", sum) per key; ``kafka-changelog``: the
        compacted rows of both upsert topics, tagged by topic. Both read as ``read_committed``
        on Apache Kafka (:meth:`_read_committed`)."""
        if self.pipeline == "kafka-sum":
            from kafka_jobs import expected_sums

            rows = [json.loads(r[3]) for r in
                    self._read_committed(self.extra["out"], self.out_partitions, SUM_RECORDS)]
            got: Counter = Counter()
            last: dict = {}
            for r in rows:
                got[(r["key"], r["id"])] += 1
                got[(r["key"], "count", r["count"])] += 1
                if r["count"] >= last.get(r["key"], {}).get("count", 0):
                    last[r["key"]] = r
            got.update((k, "final", r["sum"]) for k, r in last.items())
            want: Counter = Counter()
            for key, e in expected_sums(SUM_RECORDS).items():
                want.update((key, i) for i in e["ids"])
                want.update((key, "count", c) for c in range(1, len(e["ids"]) + 1))
                want[(key, "final", e["sum"])] += 1
            return got, want
        from changelog_jobs import grouped

        from .kafka_state import compact

        def tagged(tag: str, table: dict) -> Counter:
            return Counter((tag, *sorted(r.items())) for r in table.values())

        rows = compact(self._read_committed(self.extra["rows"], 3))
        agg = compact(self._read_committed(self.extra["agg"], 3))
        return (tagged("rows", rows) + tagged("agg", agg),
                tagged("rows", self.table) + tagged("agg", grouped(self.table)))

    def broker_state(self, job_ids: list[str]) -> dict:
        """After a run that differed: what the broker holds (kafka_state.py), and with
        ``--keep-broker`` the broker stays up for a look by hand."""
        global _KEPT
        from .kafka_state import broker_state

        if self.pipeline == "kafka-sum":
            topics = {self.extra["out"]: self.out_partitions}
            # one record per input id (its key, id, count and sum: each value is distinct)
            reference: dict = {self.extra["out"]: SUM_RECORDS}
            job_name, uids = "chaos-kafka-sum", ["kafka-out"]
        else:
            from changelog_jobs import grouped

            topics = {self.extra["rows"]: 3, self.extra["agg"]: 3}
            reference = {self.extra["rows"]: {(i,): r for i, r in self.table.items()},
                         self.extra["agg"]: {(c,): g for c, g in grouped(self.table).items()}}
            job_name, uids = "chaos-kafka-changelog", ["rows-out", "agg-out"]
        sinks = self.extra.get("sink_parallelism", 2)
        state = broker_state(self.broker.bootstrap, topics, reference, job_name=job_name,
                             uids=uids, subtasks=sinks, job_ids=job_ids)
        state["bootstrap"] = self.broker.bootstrap
        state["topics_created"] = {k: v for k, v in self.extra.items()
                                   if k in ("in", "out", "rows", "agg")}
        if KEEP_BROKER:
            _KEPT = True
            print(f"     broker kept: {self.broker.bootstrap} (pid {self.broker.proc.pid}), "
                  f"topics {state['topics_created']}", flush=True)
        return state

    def close(self) -> None:
        """The topics stay (the broker keeps them in memory until the harness exits)."""


def for_entry(entry_name: str, root: str, seed: int, seconds: float) -> KafkaHooks:
    os.makedirs(root, exist_ok=True)
    return KafkaHooks(entry_name, root)
