"""Start-up time and throughput of the running-sum job: local runner, Spark local[4] and a
2-worker Spark standalone cluster on 127.0.0.1, interleaved in one run.

    .venv/bin/python bench/spark_runners.py [--records N] [--keys K] [--reps R]

Starts (and stops, by PID) its own standalone cluster with the test fixture's helper.
Writes bench/results/spark_runners.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from running_sum import one_run  # noqa: E402
from spark_cluster import StandaloneCluster  # noqa: E402

from airflow_checkpoint_provider.engine.runners.spark import session_for  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    cluster = StandaloneCluster(tempfile.mkdtemp(prefix="bench-spark-")).start()
    results: dict[str, list] = {"local": [], "spark local[4]": [], "spark standalone": []}
    try:
        for rep in range(args.reps):
            results["local"].append(one_run(args.records, args.keys, 1000, "local", {}))
            for label, master in (("spark local[4]", "local[4]"), ("spark standalone", cluster.url)):
                spark = session_for(master, "bench", extra_conf={"spark.cores.max": "4"})
                try:
                    results[label].append(one_run(args.records, args.keys, 1000, "spark",
                                                  {"spark": spark}))
                finally:
                    spark.stop()
            for label, runs in results.items():
                print(f"rep {rep} {label}: {runs[-1]['records_per_s']:.0f} rec/s, "
                      f"start-up {runs[-1]['startup_s']} s", flush=True)
    finally:
        cluster.stop()
    summary = {label: {"records_per_s": statistics.median(r["records_per_s"] for r in runs),
                       "startup_s": statistics.median(r["startup_s"] for r in runs)}
               for label, runs in results.items()}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "spark_runners.json"), "w") as f:
        json.dump({"records": args.records, "keys": args.keys, "reps": args.reps,
                   "summary": summary, "runs": results}, f, indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
