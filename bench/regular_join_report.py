"""The "Regular join" section of BENCHMARKS.md, rendered from bench/results/regular_join.json
(written by bench/regular_join.py; bench/write_benchmarks.py calls
:func:`regular_join_section`)."""

from __future__ import annotations

ROWS = (("operator_heap", "ours, operator alone, heap"),
        ("operator_rocksdb", "ours, operator alone, RocksDB"),
        ("job_heap", "ours, job, heap"),
        ("job_rocksdb", "ours, job, RocksDB"),
        ("flink_hashmap", "Flink SQL 2.x, hashmap"),
        ("flink_rocksdb", "Flink SQL 2.x, RocksDB"))


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def regular_join_section(data: dict | None, lines: list[str]) -> None:
    """Append the section (nothing without results)."""
    if not data:
        return
    s = data["summary"]
    rates = s["rows_per_s"]
    lines += [f"## Regular join (insert-only, {s['orders']:,} orders JOIN {s['customers']:,} "
              "customers, one core)", "",
              f"Command: `taskset -c 0 .venv/bin/python bench/regular_join.py --orders "
              f"{s['orders']} --customers {s['customers']} --reps {s['reps']}`. Inner join "
              "`orders.cid = customers.id`, one output row per order, rows of both inputs per "
              "second, medians of interleaved repetitions, everything pinned to one core "
              "(slot processes and Flink's JVM inherit it). Ours: `regular_join` with primary "
              + ("keys, the operator alone (dict batches of 1,024 in one process) and the job "
                 if "operator_heap" in rates else "keys, the job ")
              + "(generator sources -> join -> discarding sink, parallelism 1, 1 s checkpoints, "
              "local runner; wall time minus start-up). Flink: PyFlink 2.x SQL, the same rows "
              "from CSV files into `blackhole`, parallelism 1, 1 s exactly-once checkpoints, "
              "no mini-batch, a warm-up job on a tenth of the orders first in the same JVM; "
              "rows / the measured job's net runtime (task deployment and the wait for a "
              "bounded job's final checkpoint included), and its marginal rate: "
              "the extra rows over the warm-up job / the extra net runtime (fixed costs "
              "cancel; noisy)."
              + (f" 1-minute load average {s['load_average'][0]:.1f} at the end (the core "
                 "is shared)." if s.get("load_average") else "")
              + (f" Conditions: {s['note']}" if s.get("note") else ""), "",
              "| runner | rows/s | vs Flink, same state kind | vs Flink's marginal rate |",
              "|---|---|---|---|"]
    marginal = s.get("flink_marginal_rows_per_s") or {}
    for key, label in ROWS:
        if key not in rates:
            continue
        if marginal.get(key):
            label = f"{label} (marginal {_fmt(marginal[key])})"
        fk = "flink_hashmap" if key.endswith("heap") else "flink_rocksdb"
        ratios = ["" if key.startswith("flink") or not base or rates[key] is None
                  else f"{rates[key] / base:.2f}x" for base in (rates.get(fk), marginal.get(fk))]
        lines.append(f"| {label} | {_fmt(rates[key])} | {ratios[0]} | {ratios[1]} |")
    lines.append("")
