"""Kafka to Kafka: our engine and Quix Streams side by side on one pinned core, on the same
broker process (issue 52 item 5; method of issue 55).

    make bench-kafka                    # installs Quix Streams' venv, then runs this
    .venv/bin/python bench/peers/kafka.py [--records 60000,180000] [--keys 100000] [--reps 3]
        [--engines ours,quixstreams] [--workloads per_record,aggregate] [--cpu 1]
        [--source-batches arrow,dicts] [--peers-dir build/peers] [--write-md]

Workloads (the same input topics for both engines: bench/peers/common.py's records, JSON
values ``{"key": "k<n>", "value": v}`` keyed by ``"k<n>"``, one partition):

* ``per_record``: Kafka -> keyed running count + sum, one output per record -> Kafka: ours
  ``KeyedProcessFunction``; Quix Streams ``apply(stateful=True)``.
* ``aggregate``: Kafka -> keyed count + sum -> Kafka: ours ``aggregate()`` (vectorized,
  one output row per key an input batch touched); Quix Streams ``apply(stateful=True)`` (its
  non-windowed keyed aggregation: per-record state, one output per record).

``--source-batches arrow,dicts`` also runs ours with ``KafkaSource(arrow=False)`` as the
engine ``ours-dicts`` (the values decoded to dicts, which the task converts to Arrow for
``aggregate()``), interleaved with the others: ``ours / peer`` of that row is the Arrow
path's gain over the dict path. ``arrow`` (the default) is ``KafkaSource(arrow=True)`` on
the aggregate workload (the per-record workload reads dicts either way); ``pylist`` and
``arrow-1k`` (engines ``ours-pylist``, ``ours-arrow-1k``) are the variants of
kafka_variants.py that tell the JSON reader's share of the gain from the batch size's.

Delivery and checkpoints at each engine's recommended setting: ours ``KafkaSource`` /
``KafkaSink`` exactly-once (their defaults), heap state, 1 s checkpoints; Quix Streams
exactly-once, RocksDB state with changelog topics, 1 s commits (kafka_ours.py,
kafka_quixstreams.py).

One Tansu broker (tests/support/kafka_server.py) on 127.0.0.1 serves every run, pinned to the same
core as the runs and stopped by its PID; the input topics are filled once before the first
run, each run writes a fresh output topic. Method as bench/peers/run.py's: every run a fresh
process pinned with ``taskset -c CPU`` (with everything it starts), engines interleaved in
each repetition, the **marginal rate** ``(n2 - n1) / (wall2 - wall1)`` between two input
sizes (ours: less the launch-to-running start-up the engine measures), **records per
CPU-second** the same difference over the CPU time of the run's processes *plus the
broker's* during the run (the broker works for both engines: fetches, produces,
transactions), the 1-minute load average at the start of every run. After each run (not
timed) the driver reads the output topic back ``read_committed`` and fails the run unless,
per key, the counts rise strictly (no record published twice) up to the key's count and
sum in the input, and (per-record workload) there is exactly one output per input record.

Writes ``kafka.json`` (bench/results unless ``--results-dir``) and, with ``--write-md``,
BENCHMARKS.md (bench/write_benchmarks.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
if ROOT not in sys.path:  # run as a script
    sys.path.append(ROOT)
from bench.peers import driver  # noqa: E402

RESULT = "kafka.json"

#: engine -> (runner script, venv folder under --peers-dir or None for the project's, label)
ENGINES = {
    "ours": ("kafka_ours.py", None,
             "ours (`KafkaSource` -> `KafkaSink` exactly-once, heap, 1 s checkpoints)"),
    "quixstreams": ("kafka_quixstreams.py", "quixstreams",
                    "Quix Streams 3.28.1 (exactly-once, RocksDB + changelog, 1 s commits)"),
    "ours-dicts": ("kafka_ours.py", None,
                   "ours, the source's values as dicts (`KafkaSource(arrow=False)`)"),
    "ours-pylist": ("kafka_ours.py", None,
                    "ours, Arrow batches by `from_pylist` of dicts, <= 1,000 records"),
    "ours-arrow-1k": ("kafka_ours.py", None,
                      "ours, Arrow batches by the JSON reader, <= 1,000 records"),
}
#: ``--source-batches`` value -> ours' engine name
VARIANTS = {"arrow": "ours", "dicts": "ours-dicts", "pylist": "ours-pylist",
            "arrow-1k": "ours-arrow-1k"}
#: engine -> more arguments of its runner
RUNNER_ARGS = {e: ["--source-batches", v] for v, e in VARIANTS.items() if v != "arrow"}
FORMS = {
    ("ours", "per_record"): "`KeyedProcessFunction`",
    ("quixstreams", "per_record"): "`apply(stateful=True)`",
    ("ours", "aggregate"): "`aggregate()`",
    ("quixstreams", "aggregate"): "`apply(stateful=True)`",
    ("ours-dicts", "per_record"): "`KeyedProcessFunction`",
    ("ours-dicts", "aggregate"): "`aggregate()` on dicts",
    **{(e, w): f for e in ("ours-pylist", "ours-arrow-1k")
       for w, f in (("per_record", "`KeyedProcessFunction`"), ("aggregate", "`aggregate()`"))},
}
WORKLOADS = {"per_record": "Kafka -> per-record keyed running count + sum -> Kafka",
             "aggregate": "Kafka -> keyed count + sum aggregation -> Kafka"}
TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1"}


def python_of(engine: str, peers_dir: str) -> str:
    return driver.python_of(ENGINES, engine, peers_dir)


# -- input and output ------------------------------------------------------------------------
def fill(broker, topic: str, n: int, keys: int) -> None:
    """The input topic: one partition, ``n`` records ``{"key", "value"}`` keyed by key."""
    driver.fill(broker, topic, n, keys, TOPIC_CONFIG, lambda key, v: {"key": key, "value": v})


def expected(n: int, keys: int) -> dict[str, tuple[int, int]]:
    """``{key: (count, sum)}`` of the first ``n`` input records."""
    from common import record

    out: dict[str, list[int]] = {}
    for i in range(n):
        key, value = record(i, keys)
        c = out.setdefault(key, [0, 0])
        c[0] += 1
        c[1] += value
    return {k: (c, s) for k, (c, s) in out.items()}


def check_output(bootstrap: str, topic: str, want: dict[str, tuple[int, int]],
                 per_record: bool, timeout: float = 180.0, settle_s: float = 1.0) -> dict:
    """Read ``topic`` back ``read_committed`` until every key reached its expected count,
    then ``settle_s`` more (a record published twice would show). A key whose count does not
    rise strictly from one output to the next was published twice; ``ok`` also needs every
    key's last output to be its expected count and sum and, ``per_record``, one output per
    input record. (The broker's high watermarks are wrong: they cannot say where the end
    is.)"""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "log_level": 3})
    consumer.assign([TopicPartition(topic, 0, 0)])
    last: dict[str, tuple[int, int]] = {}
    outputs = not_rising = 0
    done_at = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for m in consumer.consume(5000, timeout=0.2):
                if m.error() is not None:
                    continue
                v = json.loads(m.value())
                outputs += 1
                prev = last.get(v["key"])
                if prev is not None and v["count"] <= prev[0]:
                    not_rising += 1
                last[v["key"]] = (v["count"], v["sum"])
                done_at = None
            if done_at is None and len(last) == len(want) and all(
                    last[k][0] >= c for k, (c, _) in want.items() if k in last):
                done_at = time.monotonic()
            if done_at is not None and time.monotonic() - done_at > settle_s:
                break
    finally:
        consumer.close()
    wrong = sum(1 for k, cs in want.items() if last.get(k) != cs)
    total = sum(c for c, _ in want.values())
    ok = not wrong and not not_rising and len(last) == len(want) and (
        not per_record or outputs == total)
    return {"ok": ok, "outputs": outputs, "keys_wrong": wrong, "not_rising": not_rising}


# -- one run ---------------------------------------------------------------------------------
def run_one(args, broker, engine: str, workload: str, records: int, topic: str,
            want: dict, rep: int) -> dict:
    out_topic = f"bench-kafka-out-{engine}-{workload}-{records}-{rep}-{uuid.uuid4().hex[:6]}"
    broker.create_topic(out_topic, 1, config=TOPIC_CONFIG)
    state_dir = tempfile.mkdtemp(prefix=f"bench-kafka-{engine}-")
    cmd = [python_of(engine, args.peers_dir), os.path.join(HERE, ENGINES[engine][0]),
           "--workload", workload, "--records", str(records), "--keys", str(args.keys),
           "--state-dir", state_dir, "--interval-ms", str(args.interval_ms),
           "--bootstrap", broker.bootstrap, "--topic", topic, "--output-topic", out_topic,
           *RUNNER_ARGS.get(engine, [])]
    load = os.getloadavg()[0]
    broker_cpu0 = broker.cpu_s()
    try:
        r, cpu = driver.run_runner(cmd, args.cpu, args.timeout,
                                   f"{engine} {workload} {records:,}")
        broker_cpu = broker.cpu_s() - broker_cpu0
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    check = check_output(broker.bootstrap, out_topic, want, workload == "per_record")
    if not check["ok"]:
        raise RuntimeError(f"{engine} {workload} {records:,}: wrong output in {out_topic}: "
                           f"{check}")
    r.update(engine=engine, cpu_s=cpu + broker_cpu, broker_cpu_s=broker_cpu,
             outputs=check["outputs"], loadavg_before=load, loadavg_after=os.getloadavg()[0])
    return r


def command(argv: list[str], args) -> str:
    """The command that reproduces the run (``--peers-dir`` left out when it is the default)."""
    return driver.command("bench/peers/kafka.py", argv, args.peers_dir)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default="60000,180000",
                    help="two input sizes (the marginal rate is taken between them)")
    driver.add_arguments(ap, engines="ours,quixstreams",
                         cpu_help="taskset -c of every run and the broker ('' to not pin)",
                         peers_help="Quix Streams' venv (make bench-kafka creates it)")
    ap.add_argument("--source-batches", default="arrow",
                    help="ours' KafkaSource on the aggregate workload, one engine each: arrow "
                         "(Arrow batches: ours), dicts (ours-dicts), pylist, arrow-1k")
    args = ap.parse_args(argv)
    args.cpu = args.cpu or None
    sizes = sorted(int(n) for n in args.records.split(","))
    if len(sizes) != 2 or sizes[0] == sizes[1]:
        ap.error("--records takes two different sizes")
    engines = args.engines.split(",")
    batches = args.source_batches.split(",")
    if not batches or set(batches) - set(VARIANTS):
        ap.error(f"--source-batches takes some of {', '.join(VARIANTS)}")
    if "ours" in engines:  # ours' variants where ours is
        at = engines.index("ours")
        engines[at:at + 1] = [VARIANTS[b] for b in batches]
    workloads = args.workloads.split(",")
    for w in workloads:
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w!r}; use some of {', '.join(WORKLOADS)}")
    driver.check_venvs(ap, ENGINES, engines, args.peers_dir, "bench-kafka")
    sys.path.insert(0, HERE)
    broker = driver.start_broker(args.cpu)
    runs: list[dict] = []
    try:
        # filled once, read by every run (a fresh consumer group and output topic each)
        topics = {n: f"bench-kafka-input-{n}" for n in sizes}
        for n in sizes:
            fill(broker, topics[n], n, args.keys)
        wants = {n: expected(n, args.keys) for n in sizes}
        for rep in range(args.reps):
            for workload in workloads:
                for engine in engines:
                    pair = [run_one(args, broker, engine, workload, n, topics[n], wants[n], rep)
                            for n in sizes]
                    runs.append(driver.repetition(rep, workload, engine, pair))
                    m = runs[-1]["marginal"]
                    print(f"rep {rep} {workload:10} {engine:11}: {m['rate'] or 0:>9,.0f} rec/s "
                          f"marginal, {m['records_per_cpu_s'] or 0:>9,.0f} rec/CPU-s (broker "
                          f"{pair[1]['broker_cpu_s'] - pair[0]['broker_cpu_s']:+.1f} CPU-s; "
                          f"loads {pair[0]['loadavg_before']:.1f}, "
                          f"{pair[1]['loadavg_before']:.1f})", flush=True)
    finally:
        broker.stop()
    summary = driver.summarize(runs)
    driver.print_summary(summary)
    driver.write(args, RESULT, {
        "keys": args.keys, "records": sizes, "interval_ms": args.interval_ms, "cpu": args.cpu,
        "engines": {e: ENGINES[e][2] for e in engines},
        "packages": driver.packages(ENGINES, engines, args.peers_dir),
        "summary": summary, "runs": runs},
        command(argv if argv is not None else sys.argv[1:], args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
