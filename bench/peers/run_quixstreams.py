"""Quix Streams on the peers' two workloads (run by bench/peers/run.py with Quix Streams' own
venv, against the Kafka-protocol broker the driver started).

Input: the topic ``--topic`` (one partition) that the driver filled before the run, a JSON
value ``{"value": v}`` keyed by ``"k<n>"`` per record. ``per_record``: ``apply(stateful=True)``
keeping count and sum in the key's state and returning ``{"count", "sum"}`` per record into a
discarding sink that counts; ``aggregate``: ``update(stateful=True)`` of the same state, no
output per record (Quix's only non-windowed keyed aggregation is per-record state). State and
checkpoints as Quix recommends them: RocksDB state with changelog topics, exactly-once
processing, commits every ``--interval-ms``. The run stops when the last input offset has
been processed (``on_message_processed``); ``Application.stop()`` commits the last checkpoint.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Timer, parse, quix_application, report  # noqa: E402


def main(argv=None) -> None:
    args = parse(argv)
    from quixstreams.sinks.base import BaseSink

    seen = {"outputs": 0, "processed": 0}

    class DiscardSink(BaseSink):
        def add(self, value, key, timestamp, headers, topic, partition, offset) -> None:
            seen["outputs"] += 1

        def flush(self) -> None:
            pass

    app = quix_application(args, "bench-peers", seen)
    topic = app.topic(args.topic, key_deserializer="str", value_deserializer="json")
    sdf = app.dataframe(topic)

    def running(value: dict, state) -> dict:
        c = state.get("count", 0) + 1
        s = state.get("sum", 0) + value["value"]
        state.set("count", c)
        state.set("sum", s)
        return {"count": c, "sum": s}

    if args.workload == "per_record":
        sdf = sdf.apply(running, stateful=True)
        sdf.sink(DiscardSink())
    else:
        sdf = sdf.update(running, stateful=True)
    with Timer() as t:
        app.run()
    ok = seen["processed"] == args.records and (
        args.workload != "per_record" or seen["outputs"] == args.records)
    report(args, t.wall_s, seen["outputs"], ok, processed=seen["processed"])


if __name__ == "__main__":
    main()
