"""BENCHMARKS.md's section of bench/peers/kafka.py (kafka.json): Kafka to Kafka, our engine
and Quix Streams on one pinned core and the same broker, per workload."""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from report_common import fmt, table  # noqa: E402

from bench.peers import report  # noqa: E402
from bench.peers.kafka import FORMS, WORKLOADS  # noqa: E402

HEADING = "Kafka to Kafka: ours and Quix Streams on one core"
COLUMNS = ["workload", "engine", "marginal rate (rec/s)", "records per CPU-second",
           "ours / peer", "ours / peer per CPU-second", "reps"]


def cpu_ratio(data: dict, workload: str, engine: str) -> float | None:
    """The median over the repetitions of ours' records per CPU-second over ``engine``'s in
    the same repetition: the ratio that holds on a loaded machine (the wall-time one,
    ``ours / peer``, drifts with what else shares the core)."""
    by = {(r["engine"], r["rep"]): r["marginal"]["records_per_cpu_s"]
          for r in data.get("runs", []) if r["workload"] == workload}
    ratios = [by[("ours", rep)] / v for (e, rep), v in by.items()
              if e == engine and v and by.get(("ours", rep))]
    return statistics.median(ratios) if ratios and engine != "ours" else None


def rows(data: dict) -> list[list]:
    return [[WORKLOADS[s["workload"]],
             report.engine_cell(data, s["workload"], s["engine"], FORMS),
             fmt(s["rate"]), fmt(s["records_per_cpu_s"]),
             report.ratio_cell(s.get("ours_over_peer")),
             report.ratio_cell(cpu_ratio(data, s["workload"], s["engine"])),
             report.reps_cell(data, s)] for s in report.in_order(data, WORKLOADS)]


def what(data: dict) -> str:
    """The paragraph under the heading: what ran and how it was measured."""
    n1, n2 = data["records"]
    return (f"{data['keys']:,} keys; the same input topics (one partition, JSON values) for "
            "both engines, on one Tansu Kafka-protocol broker process; each engine at its "
            "recommended exactly-once setting, every "
            f"{data['interval_ms']:,} ms (ours: `KafkaSource` -> `KafkaSink`, heap state; Quix "
            "Streams: RocksDB + changelog topics, Kafka transactions); every process, the "
            "broker included, "
            + (f"pinned to CPU {data['cpu']}" if data.get("cpu") else "not pinned")
            + ", engines interleaved. Rate: the "
            f"marginal rate between {n1:,} and {n2:,} input records; records per CPU-second: "
            "the same difference over the CPU time of the run's processes and the broker's; "
            "ours / peer: the median of the same repetition's ratios (of marginal rates, and of "
            "records per CPU-second, the one that holds on a loaded machine); "
            "every run's output topic read back `read_committed` and checked (per key counts "
            "rising to the input's count and sum; one output per record on the per-record "
            "workload). Quix Streams' keyed aggregation outside windows is per-record state "
            "with one output per record, so it runs the same form on both workloads; ours' "
            "`aggregate()` emits one row per key an input batch touched. "
            "`make bench-kafka` installs Quix Streams.")


def render(data: dict | None) -> list[str]:
    if not data:
        return []
    return [f"## {HEADING}", "", f"Command: `{data['command']}`", "", what(data), "",
            *table(COLUMNS, rows(data)), ""]


def row_load(data: dict, cells: list[str]) -> float | None:
    """The highest 1-minute load average at the start of a row's runs."""
    return report.row_load(data, cells, WORKLOADS, FORMS)
