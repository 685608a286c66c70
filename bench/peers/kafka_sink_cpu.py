"""CPU seconds of ``KafkaSink``'s exactly-once writer per epoch, by phase: ``write`` (encode),
``pre_commit`` (stage into the checkpoint), ``commit`` (publish in one transaction with its
marker), on a Tansu broker this script starts on 127.0.0.1 and stops (tests/support/kafka_server.py).

    .venv/bin/python bench/peers/kafka_sink_cpu.py [--records 50000] [--epochs 3] [--cpu 1]

For an A/B of two commits run it from a ``git worktree`` of each, interleaved, with
``PYTHONPATH`` set to the worktree. Prints one JSON line: the mean CPU seconds per epoch of
each phase (``time.process_time`` of this process: librdkafka's threads included).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=50_000, help="records per epoch")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--cpu", default=None, help="taskset -c of the broker")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
    from kafka_server import TansuBroker

    from airflow_checkpoint_provider.engine.connectors.base import SourceContext
    from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSink

    broker = TansuBroker(cpu=args.cpu).start()
    try:
        topic = broker.create_topic(f"sink-cpu-{uuid.uuid4().hex[:8]}")
        sink = KafkaSink(broker.bootstrap, topic, key="key", marker_topic=f"m-{topic}")
        writer = sink.create_writer(SourceContext("job", "sink-cpu", "out", 0, 1, 0))
        writer.recover([])
        rows = [{"key": f"k{i % 10_000}", "count": i // 10_000 + 1, "sum": i * 7,
                 "value": i % 100} for i in range(args.records)]
        spent = {"write": 0.0, "pre_commit": 0.0, "commit": 0.0}
        for epoch in range(1, args.epochs + 1):
            t0 = time.process_time()
            writer.write(rows)
            t1 = time.process_time()
            txns = writer.pre_commit(epoch)
            t2 = time.process_time()
            writer.commit(txns)
            t3 = time.process_time()
            spent["write"] += t1 - t0
            spent["pre_commit"] += t2 - t1
            spent["commit"] += t3 - t2
        writer.close()
    finally:
        broker.stop()
    print(json.dumps({"records_per_epoch": args.records, "load": round(os.getloadavg()[0], 1),
                      **{k: round(v / args.epochs, 4) for k, v in spent.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
