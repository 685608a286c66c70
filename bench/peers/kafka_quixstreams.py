"""Quix Streams on the Kafka benchmark's two workloads (run by bench/peers/kafka.py with
Quix Streams' own venv, against the broker the driver started).

Input: the topic ``--topic`` (one partition) the driver filled, a JSON value
``{"key": "k<n>", "value": v}`` keyed by ``"k<n>"`` per record; output: the topic
``--output-topic``, one JSON record ``{"key", "count", "sum"}`` per input record, keyed as
the input.

Both workloads are ``apply(stateful=True)`` keeping count and sum in the key's state and
returning the running ``{"key", "count", "sum"}`` -> ``to_topic``: Quix Streams' keyed
aggregation outside windows is per-record state, and it has no batched (update-mode)
output, so its aggregate to Kafka emits once per record. State and checkpoints as Quix
recommends them: RocksDB state with changelog topics, exactly-once processing (Kafka
transactions), commits every ``--interval-ms``. The run stops when the last input offset
has been processed (``on_message_processed``); ``Application.stop()`` commits the last
checkpoint.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Timer, parse, quix_application, report  # noqa: E402


def main(argv=None) -> None:
    args = parse(argv)

    seen = {"processed": 0}
    app = quix_application(args, "bench-kafka", seen)
    source = app.topic(args.topic, key_deserializer="str", value_deserializer="json")
    sink = app.topic(args.output_topic, key_serializer="str", value_serializer="json")

    def running(value: dict, key: str, timestamp: int, headers, state) -> dict:
        c = state.get("count", 0) + 1
        s = state.get("sum", 0) + value["value"]
        state.set("count", c)
        state.set("sum", s)
        return {"key": key, "count": c, "sum": s}

    app.dataframe(source).apply(running, stateful=True, metadata=True).to_topic(sink)
    with Timer() as t:
        app.run()
    report(args, t.wall_s, seen["processed"], seen["processed"] == args.records)


if __name__ == "__main__":
    main()
