"""Render BENCHMARKS.md, the user page of the benchmarks, from the result files of the bench
scripts (`make bench` and `make bench-nexmark` call it at their end):

    .venv/bin/python bench/write_benchmarks.py [--results-dir bench/results] [--output BENCHMARKS.md]

One table per benchmark family (``FAMILIES``): the table a family's section renderer
(bench/*_report.py) draws, cut to the columns a user reads, with the command that
reproduces it and the 1-minute load average of each row; dates, loads and the machine come
from bench/results/conditions.json (stamped by ``report_common.record_conditions`` when a
script writes its results). Nothing on the page is written by hand; the investigation
history is bench/HISTORY.md. tests/integration/bench/test_write_benchmarks_sections.py checks that a
regeneration equals the committed page.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from backpressure_report import render as backpressure_section  # noqa: E402
from cdc_report import cdc_section  # noqa: E402
from downtime_report import AIRFLOW_FIRST as downtime_airflow_first  # noqa: E402
from downtime_report import AIRFLOW_LABELS as downtime_airflow_labels  # noqa: E402
from downtime_report import airflow_commands as downtime_airflow_commands  # noqa: E402
from downtime_report import airflow_dates as downtime_airflow_dates  # noqa: E402
from downtime_report import airflow_load as downtime_airflow_load  # noqa: E402
from downtime_report import render as downtime_section  # noqa: E402
from engine_report import (  # noqa: E402
    latency_medians,
    latency_section,
    overhead_section,
    recovery_section,
    scaling_section,
    scaling_sheet_section,
    sinks_section,
    state_section,
    unaligned_section,
)
from joins_report import joins_section  # noqa: E402
from report_common import Results, fmt  # noqa: E402


def sss_section(r: Results, lines: list[str]) -> None:
    data = r.load("structured_streaming.json")
    if not data or "scenarios" not in data.get("summary", {}):
        return
    s = data["summary"]
    runners = s["runners"]
    lines += [f"## Against Spark Structured Streaming at saturation ({s['keys']:,} keys, local[2], "
              f"{s['reps']} interleaved reps)", "",
              f"Command: `.venv/bin/python bench/structured_streaming.py --keys {s['keys']} "
              f"--reps {s['reps']}`. Each engine is fed faster than it can process and its "
              "sustained rate is read after start-up. Structured Streaming: `rate-micro-batch` "
              f"source ({s['str_rows_per_batch']:,} rows per batch with string keys, "
              f"{s['int_rows_per_batch']:,} with int64 keys, sized so that every batch takes longer "
              "than the 1 s trigger; the last column counts those that did not), groupBy(key).agg(count, sum), update mode, RocksDB state store "
              "with changelog checkpointing, 2 shuffle partitions, noop sink; rows / summed "
              f"triggerExecution of {s['batches']} batches after {s['warmup_batches']} warm-up "
              "ones. Ours: `key_by(\"key\").aggregate(count, sum)` on Arrow batches (the "
              "pipeline's `batch_size` 8192; an Arrow source reads `arrow_batch_size` rows at a "
              "time, default 65,536), "
              "parallelism 2, checkpoints every 1 s, discarding sink "
              f"({s['str_records']:,} / {s['int_records']:,} records); records / (wall time "
              "minus launch-to-running start-up), the final checkpoint and teardown included. "
              "Per record: SS `applyInPandasWithState` (count and sum per key in Python state; "
              f"{s.get('pandas_rows_per_batch', 0):,} rows per batch, "
              f"{s.get('pandas_batches', 1)} measured after one warm-up, in "
              f"{s.get('per_record_reps', s['reps'])} of the repetitions: one Python call per key "
              "and batch makes a batch take minutes) vs our `KeyedProcessFunction` running sum "
              f"({s['per_record_records']:,} records, heap state, exactly-once file sink, local "
              "runner).", "",
              "| scenario | SS sustained (rows/s) | "
              + " | ".join(f"ours, {k} runner (rows/s) | ours / SS ({k})" for k in runners)
              + " | SS batches under 1 s |",
              "|---|---|" + "---|---|" * len(runners) + "---|"]
    names = {"str": "vectorized, string keys", "int": "vectorized, int64 keys",
             "per_record": "per record (Python state per key)"}
    for mode, sc in s["scenarios"].items():
        cells = []
        for k in runners:
            if f"ratio_{k}" in sc:
                cells.append(f"{fmt(sc[f'{k}_records_per_s'])} | **{sc[f'ratio_{k}']:.2f}**")
            else:
                cells.append("- | -")
        lines.append(f"| {names[mode]} | {fmt(sc['ss_records_per_s'])} | " + " | ".join(cells)
                     + f" | {sc['ss_batches_under_trigger']} |")
    lines += ["", "Ratios are medians of the per-repetition ratios (each repetition runs both "
              "engines back to back). Per repetition:", "",
              "| rep | scenario | SS | " + " | ".join(f"ours {k}" for k in runners) + " |",
              "|---|---|---|" + "---|" * len(runners)]
    for i, run in enumerate(data["runs"]):
        for mode, row in run.items():
            lines.append(f"| {i} | {names[mode]} | {fmt(row['ss']['sustained_records_per_s'])} | "
                         + " | ".join(fmt(row[k]["sustained_records_per_s"]) if k in row else "-"
                                      for k in runners) + " |")
    lines.append("")


def event_time_section(r: Results, lines: list[str]) -> None:
    data = r.load("event_time.json")
    if not data:
        return
    s = data["summary"]
    if s["reps"]:
        lines += [f"## Event-time windows against Structured Streaming ({s['keys']:,} keys, "
                  f"local[2], {s['reps']} interleaved reps)", "",
                  f"Command: `.venv/bin/python bench/event_time.py --keys {s['keys']} --reps "
                  f"{s['reps']}`. {s['window_ms'] // 1000} s tumbling event-time windows, count "
                  f"and sum per key and window, watermark delay {s['delay_ms']} ms, string keys. "
                  "SS: `withWatermark` + `groupBy(window(t), key).agg(count, sum)`, append mode, "
                  "RocksDB state store with changelog checkpointing, noop sink, "
                  f"`rate-micro-batch` source with {s['rows_per_batch']:,} rows per batch, each "
                  "batch one second of event time; rows / summed triggerExecution after the "
                  "warm-up batches. Ours: `key_by(\"key\").window(TumblingWindows(10 s))"
                  ".aggregate(count, sum)` on Arrow batches, the same rows per second of event "
                  f"time, parallelism 2, 1 s checkpoints, discarding sink, {s['records']:,} "
                  "records, local runner; records / (wall time - start-up).", "",
                  "| | SS sustained (rows/s) | ours (rows/s) | ours / SS | SS batches under 1 s |",
                  "|---|---|---|---|---|",
                  f"| median | {fmt(s['ss_records_per_s'])} | {fmt(s['local_records_per_s'])} | "
                  f"**{s['ratio_local']:.2f}** | {s['ss_batches_under_trigger']} |"]
        for i, run in enumerate(data["runs"]):
            lines.append(f"| rep {i} | {fmt(run['ss']['sustained_records_per_s'])} | "
                         f"{fmt(run['local']['sustained_records_per_s'])} | "
                         f"{run['ratio_local']:.2f} | {run['ss']['batches_under_trigger']} |")
        lines.append("")
    sizes = s.get("state_bytes") or {}
    if sizes:
        names = {"windows": "10 s tumbling windows, 100,000 keys",
                 "aggregate_ttl": "aggregate() over ever new keys, ttl 5 s",
                 "aggregate_no_ttl": "aggregate() over ever new keys, no TTL"}
        lines += [f"## State size over a long run ({s['flat_rate']:,.0f} rows/s for "
                  f"{s['flat_seconds']:.0f} s, 1 s checkpoints)", "",
                  "Checkpointed state size (bytes, all subtasks) at the first, the middle and the "
                  "last checkpoints of each run, and the largest. With windows or a TTL the "
                  "size levels off; without a TTL it grows with every key seen.", "",
                  "| job | checkpoints | first | middle | last but one | largest |",
                  "|---|---|---|---|---|---|"]
        for name, series in sizes.items():
            if not series:
                continue
            # the last checkpoint is the one at end of input (windows: everything fired)
            lines.append(f"| {names.get(name, name)} | {len(series)} | {fmt(series[0])} | "
                         f"{fmt(series[len(series) // 2])} | {fmt(series[max(0, len(series) - 2)])} "
                         f"| {fmt(max(series))} |")
        lines.append("")


# --- the user page -------------------------------------------------------------------------

#: a row taken at a 1-minute load average above this says so in its load cell
LOAD_LIMIT = 4.0
LOAD_MARK = "**above 4**"
CONDITIONS = "conditions.json"


def split_tables(lines: list[str]) -> list[list[str]]:
    """The Markdown tables of a rendered section, each as its lines (header, rule, rows)."""
    out, cur = [], None
    for line in lines:
        if line.startswith("|"):
            if cur is None:
                cur = []
                out.append(cur)
            cur.append(line)
        else:
            cur = None
    return out


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def row(values) -> str:
    return "| " + " | ".join(values) + " |"


def load_cell(load, text: str | None = None, shared: bool = False) -> str:
    """The load column of a row: the 1-minute load average, marked when above LOAD_LIMIT."""
    if load is None:
        return f"not recorded, shared machine (likely {LOAD_MARK})" if shared else "not recorded (quiet)"
    shown = text or f"{load:.1f}"
    return f"{shown} ({LOAD_MARK})" if load > LOAD_LIMIT else shown


class Family:
    """One table of the page: a benchmark family, rendered from its result file by the
    section renderer of bench/*_report.py, cut down to the table a user reads."""

    def __init__(self, heading, name, render, *, table=0, columns=None, keep=None,
                 command=None, command_re=r"Commands?: `([^`]*)`", what="", peer=None,
                 row_load=None, same_run=True, measured=None):
        self.heading, self.name, self.render, self.table = heading, name, render, table
        #: data -> the date of the family's runs, when its result file holds runs of other
        #: dates too (default: the file's date in conditions.json)
        self.measured = measured
        self.columns, self.keep, self.command, self.command_re = columns, keep, command, command_re
        self.what, self.peer, self.row_load, self.same_run = what, peer, row_load, same_run

    def lines(self, r: Results, cond: dict) -> list[str]:
        import re

        data = r.load(self.name)
        if not data:
            return []
        rendered = self.render(r)
        tables = split_tables(rendered)
        # the first table from index `table` on that has every column asked for
        t = next((t for t in tables[self.table:]
                  if not self.columns or set(self.columns) <= set(cells(t[0]))), None)
        if t is None:
            return []
        head = cells(t[0])
        idx = [head.index(c) for c in self.columns] if self.columns else list(range(len(head)))
        body = [cells(x) for x in t[2:]]
        if self.keep:
            body = [b for b in body if self.keep(b)]
        command = self.command(data) if callable(self.command) else self.command
        if command is None:
            m = re.search(self.command_re, "\n".join(rendered))
            command = (m.group(1) if m else
                       cond.get(self.name, {}).get("command") or "(not recorded)")
        if not command.startswith(("make ", ".venv/", "taskset", "PYTHONPATH")):
            command = ".venv/bin/python " + command.removeprefix("python ")
        c = cond.get(self.name, {})
        when = c.get("measured_on", "on a date not recorded")
        if c.get("measured_from"):
            when = f"{c['measured_from']} to {when}"
        if self.measured is not None:
            when = self.measured(data) or when
        peer = ""
        if self.peer:
            peer = (f"; {self.peer} measured in the same run" if self.same_run else
                    f"; {self.peer} measured by the same script on the same input")
        # no blank line under the heading (Markdown renders the same; the page has a
        # 300-line bound, tests/integration/bench/test_write_benchmarks_sections.py)
        out = [f"## {self.heading}",
               f"Command: `{command}`. Measured {when}{peer}. "
               + (self.what(data) if callable(self.what) else self.what), "",
               row([head[i] for i in idx] + ["load (1 min)"]), "|" + "---|" * (len(idx) + 1)]
        for b in body:
            if self.row_load:
                load = self.row_load(data, b)
                cell = load_cell(load)
            else:
                cell = load_cell(c.get("load_1m"), c.get("load_text"), c.get("shared", False))
            out.append(row([b[i] for i in idx] + [cell]))
        return out + [""]


def _section(fn):
    """A renderer of the form fn(r, lines) as r -> lines."""
    def render(r):
        lines: list[str] = []
        fn(r, lines)
        return lines
    return render


def _peers_report():
    sys.path.insert(0, ROOT)
    import bench.peers.report

    return bench.peers.report


def _kafka_report():
    """bench/peers/kafka_report.py, imported when rendered (as the peers' report)."""
    sys.path.insert(0, ROOT)
    import bench.peers.kafka_report

    return bench.peers.kafka_report


def _nexmark(r):
    sys.path.insert(0, ROOT)
    from bench.nexmark.report import render

    return render(r.load("nexmark.json"))


def _defaults():
    """bench/defaults.py, imported when rendered (it imports the engine only to run jobs)."""
    sys.path.insert(0, ROOT)
    import bench.defaults

    return bench.defaults


def _nexmark_load(data, b):
    loads = [x["loadavg_before"][0] for x in data["runs"] if x["query"] == b[0]
             and x.get("loadavg_before") and not (x.get("kind") == "recovery" or x.get("fail_at"))]
    return max(loads) if loads else None


def _join_section(name):
    def render(r):
        lines: list[str] = []
        if name == "joins":
            joins_section(r.load("joins.json"), lines)
        else:  # bench/join_state.py, imported only then (engine)
            getattr(__import__("join_state"), f"{name}_section")(r.load(f"{name}.json"), lines)
        return lines
    return render


def _upserts(r):
    from bench.upsert_report import render

    return render(r.load("upsert_sinks.json"))


def _cdc(r):
    lines: list[str] = []
    cdc_section(r.load("cdc.json"), lines)
    return lines



def _airflow_what(data: dict) -> str:
    """What the "Cut-overs through Airflow" rows measure (the standby's sentences once a
    standby upgrade is recorded)."""
    scenarios = ((data.get("runners") or {}).get("airflow") or {}).get("scenarios", {})
    if "savepoint-standby" not in scenarios:
        return ("Seconds from blue's last row to green's first as a reader of the sink table "
                "sees them (sampled every 0.5 s): the `blue_green_upgrade` DAG in a real "
                "deployment (Airflow 3 as separate processes, the Spark standalone cluster, "
                "parallelism 3, 1 s checkpoints into PostgreSQL 2PC sinks), approved over the "
                "REST API; printed by `tests/deployment/cluster/test_postgres_blue_green_deployment.py` "
                "(`pytest -s`). Stop: blue's stop request; slots + restore: green's PROMOTE.")
    return ("Seconds from the old job's last row to the new one's first as a reader of the "
            "sink table sees them (sampled every 0.5 s), in a real deployment (Airflow 3 as "
            "separate processes, the Spark standalone cluster, 1 s checkpoints into PostgreSQL "
            "2PC sinks, DAGs triggered over the REST API). Blue-green: the `blue_green_upgrade` "
            "DAG at parallelism 3, approved over the REST API, printed by "
            "`tests/deployment/cluster/test_postgres_blue_green_deployment.py` (`pytest -s`); stop: blue's "
            "stop request; slots + restore: green's PROMOTE. Standby: the "
            "`savepoint_upgrade_standby` DAG at parallelism 1, printed by "
            "`tests/deployment/cluster/test_standby_upgrade_deployment.py`; stop: v1's stop request; "
            "slots + restore: v2's job row (created when it saw v1 end) to RUNNING, its "
            "application started before the stop.")


FAMILIES = [
    Family("Keyed aggregation against Structured Streaming", "structured_streaming.json",
           _section(sss_section), peer="Structured Streaming",
           columns=["scenario", "SS sustained (rows/s)", "ours, local runner (rows/s)",
                    "ours / SS (local)", "ours, spark runner (rows/s)", "ours / SS (spark)"],
           what=lambda d: "Both engines fed faster than they can process, 2 cores, "
                f"{d['summary']['keys']:,} keys; "
                "`groupBy(key).agg(count, sum)` (RocksDB state store, 1 s trigger) against "
                "`key_by(\"key\").aggregate(count, sum)` (1 s checkpoints); per record: "
                "`applyInPandasWithState` against a `KeyedProcessFunction` (SS calls Python once "
                "per key and batch: its rate depends on the batch size). Ratios are medians of "
                "the per-pair ratios."),
    Family("Event-time windows against Structured Streaming", "event_time.json",
           _section(event_time_section), peer="Structured Streaming",
           columns=["", "SS sustained (rows/s)", "ours (rows/s)", "ours / SS"],
           keep=lambda b: b[0] == "median",
           what=lambda d: f"{d['summary']['window_ms'] / 1000:g} s tumbling event-time windows, "
                f"count and sum per key and window, {d['summary']['keys']:,} string keys, "
                f"watermark delay {d['summary']['delay_ms']:,} ms, 1 s checkpoints, at "
                "saturation."),
    Family("State size over a long run", "event_time.json", _section(event_time_section),
           columns=["job", "checkpoints", "first", "middle", "largest"],
           what="Checkpointed state in bytes (all subtasks) over a run at a steady rate, 1 s "
                "checkpoints: with windows or a TTL it levels off, without a TTL it grows with "
                "every key seen."),
    Family("Stream-stream joins against Structured Streaming", "joins.json",
           _join_section("joins"), peer="Structured Streaming",
           columns=["join", "SS sustained (rows/s)", "ours (rows/s)", "ours / SS"],
           keep=lambda b: not b[0].startswith("rep "),
           what=lambda d: "Inner interval and window joins of two streams, "
                f"{d['summary']['keys']:,} string keys, watermark bound "
                f"{d['summary']['bound_ms']} ms, RocksDB state store for SS, 1 s checkpoints for "
                f"ours; {d['summary']['reps']} repetition(s)."),
    Family("Regular join against Flink", "regular_join.json", _join_section("regular_join"),
           peer="Flink SQL 2.3", command_re=r"Command: `([^`]*)`",
           what=lambda d: f"Insert-only join of {d['summary']['orders']:,} orders with "
                f"{d['summary']['customers']:,} customers on one pinned core; "
                "Flink's plain rate includes its fixed costs on this bounded input, its marginal "
                "rate (in the row) does not."),
    Family("Nexmark against Flink", "nexmark.json", _nexmark,
           table=0, command="make bench-nexmark", peer="Flink 2.3",
           keep=lambda b: b[0].startswith("q"),
           columns=["query", "ours heap", "ours RocksDB", "Flink, generated source",
                    "ours heap / Flink, generated source",
                    "per CPU-second: ours heap / Flink, generated source"],
           row_load=_nexmark_load,
           what=lambda d: "Events per second at parallelism 1, every engine pinned to one core "
                "(`taskset -c 1`, each run started once the 1-minute load average was below "
                f"{d['args'].get('wait_load') or 2:g}: the load column), "
                "exactly-once checkpoints every 10 s. Ours reads the Nexmark events from Parquet "
                f"(up to {d['args']['files']} x {d['args']['events_per_file']:,}; "
                "`FileSource` -> query -> `DiscardSink`; q10 writes partitioned JSON files) on "
                "the heap and RocksDB backends; Flink 2.3 (PyFlink SQL, nexmark-flink's "
                "queries and mini-batch settings, hashmap backend, blackhole sinks) computes the "
                "same distributions of events in SQL from a number sequence, so its source is "
                "not its bottleneck (its CSV reader was); rate = events / the job's net runtime "
                "after a warm-up job. Per CPU-second: events per CPU-second of every process of "
                "ours against the Flink JVM's during its job. Flink runs no q6."),
    Family("What the defaults cost", "defaults.json",
           lambda r: _defaults().render(r.load("defaults.json")),
           command=lambda d: d["command"], measured=lambda d: d.get("measured"),
           row_load=lambda d, b: _defaults().row_load(d, b),
           what=lambda d: _defaults().what(d)),
    Family("End-to-end latency", "latency.json", _section(latency_section),
           peer="Structured Streaming (`ss_aggregate`)",
           columns=["job", "offered rows/s", "p50 (ms)", "p99", "max", "worst p99"],
           what=lambda d: f"Generation to sink, milliseconds, {d['summary']['keys']:,} keys, "
                "parallelism 2, checkpoints every 1 s included; SS with a 1 s trigger at the same offered rate."),
    Family("Checkpointing overhead", "checkpoint_overhead.json", _section(overhead_section),
           columns=["job", "rep", "no checkpoints (rec/s)", "checkpoints every 1 s (rec/s)",
                    "ratio"],
           what="Throughput with checkpoints every 1 s against none, interleaved pairs, local "
                "runner, parallelism 2."),
    Family("The per-record path on one core", "per_record.json",
           lambda r: __import__("per_record_report").render(r.load("per_record.json")),
           columns=["backend", "engine", "marginal rate (rec/s)", "records per CPU-second",
                    "reps", "target (rec/s)"],
           row_load=lambda d, b: __import__("per_record_report").row_load(d, b),
           what=lambda d: f"Generator -> `key_by` -> a `KeyedProcessFunction` keeping a running "
                f"count and sum per key ({d['keys']:,} keys, one output per record) -> "
                f"{d['sink']} sink; parallelism 1, checkpoints every {d['interval_ms']:,} ms, "
                f"defaults otherwise, every run pinned to CPU {d['cpu']}. Rate: the marginal rate "
                f"between {d['records'][0]:,} and {d['records'][1]:,} records; records per "
                "CPU-second: the same difference over the CPU time of the job's processes (the "
                "check that holds on a loaded machine). Engine trees measured interleaved."),
    Family("The Python peers on one core", "peers.json",
           lambda r: _peers_report().render(r.load("peers.json")),
           peer="Bytewax, Quix Streams and Pathway",
           columns=["workload", "engine", "marginal rate (rec/s)", "records per CPU-second",
                    "ours / peer", "reps"],
           row_load=lambda d, b: _peers_report().row_load(d, b),
           what=lambda d: f"{d['keys']:,} keys, the same generated input for every engine, "
                f"checkpointing or persistence on at each engine's recommended setting every "
                f"{d['interval_ms']:,} ms (ours: heap, and RocksDB where a row says so; Bytewax: "
                "SQLite recovery; Quix Streams: RocksDB + changelog topics, exactly-once, on a Tansu Kafka-protocol broker; "
                "Pathway: filesystem persistence); every process of every engine, the broker "
                f"included, pinned to CPU {d['cpu']}, engines interleaved. Rate: the marginal "
                f"rate between {_peers_report().sizes(d)}; records "
                "per CPU-second: the same difference over the CPU time of the run's processes "
                "(the broker's included for Quix). `make bench-peers` installs the peers."
                + _peers_report().not_run(d)),
    Family("Kafka to Kafka: ours and Quix Streams on one core", "kafka.json",
           lambda r: _kafka_report().render(r.load("kafka.json")),
           peer="Quix Streams",
           columns=["workload", "engine", "marginal rate (rec/s)", "records per CPU-second",
                    "ours / peer", "ours / peer per CPU-second", "reps"],
           row_load=lambda d, b: _kafka_report().row_load(d, b),
           what=lambda d: _kafka_report().what(d)),
    Family("Job master CPU with checkpoints every second", "jobmaster_overhead.json",
           lambda r: __import__("jobmaster_overhead").render(r.load("jobmaster_overhead.json")),
           what=lambda d: f"CPU of the job master's process (its loop, the metadata writer, the "
                f"checkpoint coordinator; not the slots) on a small job ({d['summary']['rate']} "
                "records/s, parallelism 2, SQLite metadata DB, local runner), steady state: CPU "
                "difference over wall-time difference of a short and a long run, so start-up "
                "cancels. The checkpoints' share is the figure with checkpoints minus the one "
                "without."),
    Family("Checkpoint duration by state size", "checkpoint_scaling.json",
           _section(scaling_section),
           columns=["keys", "checkpoints", "p50 (ms)", "p99 (ms)", "max (ms)", "largest (MB)",
                    "rec/s"],
           what="The `aggregate` job, 1 s checkpoints, durations from trigger to completion."),
    Family("Scaling by parallelism", "scaling.json", _section(scaling_sheet_section),
           what="Records per second of each job at parallelism 1 and 2 on 2 cores, local "
                "runner and a standalone Spark cluster, 1 s checkpoints."),
    Family("Recovery", "recovery.json", _section(recovery_section),
           columns=["rep", "recovery (s)", "restart to running (s)", "restored checkpoint (MB)"],
           what=lambda d: f"{d['summary']['keys']:,} keys; a slot killed, the job restarted from its latest checkpoint; "
                "recovery = failure to the restored job's first record processed."),
    Family("Aligned and unaligned checkpoints under backpressure", "unaligned.json",
           _section(unaligned_section),
           what=lambda d: f"The sink throttled to 10% of the source rate for {d['seconds']:g} s, "
                "checkpoints every 1 s."),
    Family("Checkpoints under backpressure with buffer debloating", "backpressure.json",
           lambda r: backpressure_section(r), command=lambda data: data["command"],
           keep=lambda b: b[0] == "local" and b[5] == "on" and b[1] in ("1000 us", "10000 us"),
           columns=["cost/record", "overload", "mode", "checkpoints", "per interval",
                    "p50 (ms)", "p99 (ms)", "throughput (rec/s)"],
           what="A per-record function sleeping the cost per record fed at 1x to 10x its "
                "capacity, 2 subtasks, checkpoints every 1 s, debloating on (the default); one "
                "run per cell."),
    Family("Exactly-once sinks", "sinks.json", _section(sinks_section),
           what=lambda d: f"{d['records']:,} rows, 1 s checkpoints, commit on checkpoint "
                "completion."),
    Family("Upsert sinks", "upsert_sinks.json", _upserts,
           what=lambda d: "Changes per second into each sink in upsert mode (a tenth deletes), "
                f"{d['keys']:,} keys."),
    Family("PostgreSQL CDC end to end", "cdc.json", _cdc,
           columns=["sink", "snapshot rows/s", "changes/s under load (pgbench tps)",
                    "lag s median / max", "backlog changes/s (s)"],
           what=lambda d: f"`pgbench -s {d['scale']}` captured through logical replication into "
                "each sink; one run."),
    Family("Snapshot cost of the per-record state backends", "state_backends.json",
           _section(state_section),
           columns=["keys", "backend", "sync p50 (ms)", "total p99 (ms)", "full state (MB)",
                    "written per checkpoint (MB)"],
           what="1% of the keys updated between checkpoints."),
    Family("Cut-overs through Airflow", "downtime.json", lambda r: downtime_section(r),
           command_re=r"Real deployment through airflow: `([^`]*)`",
           command=lambda data: downtime_airflow_commands(data),
           columns=[downtime_airflow_first, "runs", "output gap p50 / max", "stop",
                    "slots + restore", "first commit after RUNNING", "lost / duplicated"],
           row_load=lambda data, b: downtime_airflow_load(data, b[0]),
           measured=lambda data: downtime_airflow_dates(data),
           what=lambda data: _airflow_what(data)),
]


def conditions(results_dir: str) -> dict:
    path = os.path.join(results_dir, CONDITIONS)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def machine_line(m: dict) -> str:
    if not m:
        return "Machine: not recorded."
    parts = [f"{m.get('cores', '?')} cores", f"{m.get('memory_gib', '?')} GiB memory",
             f"CPU {m['cpu_model']}" if m.get("cpu_model") else "CPU model not recorded",
             m.get("system", "")]
    versions = [f"{k} {m[k]}" for k in ("python", "pyspark", "pyarrow", "flink") if m.get(k)]
    names = {"python": "Python", "pyspark": "PySpark", "pyarrow": "pyarrow", "flink": "Flink"}
    versions = [f"{names[k]} {m[k]}" for k in ("python", "pyspark", "pyarrow", "flink") if m.get(k)]
    return ("Machine: " + ", ".join(p for p in parts if p) + ". Versions: "
            + (", ".join(versions) or "not recorded") + ".")


def summary(r: Results, tables: dict[str, list[str]]) -> list[str]:
    """Five lines, from the tables below."""
    def rows(name):
        return [cells(x) for x in tables.get(name, [])[2:]]

    out = []
    sss = r.load("structured_streaming.json")
    sc = ((sss or {}).get("summary") or {}).get("scenarios") or {}
    if sc:
        parts = [f"{sc[m]['ratio_local']:.2f}x with {w}" for m, w in
                 (("str", "string keys"), ("int", "int64 keys")) if "ratio_local" in sc.get(m, {})]
        pr = sc.get("per_record", {}).get("ratio_local")
        out.append("- Keyed aggregation at saturation runs at " + " and ".join(parts)
                   + " Structured Streaming's rate" + (f"; the per-record path at {pr:.1f}x "
                   "`applyInPandasWithState`" if pr else "") + ".")
    et = r.load("event_time.json")
    jn = rows("joins.json")
    if et and et["summary"].get("ratio_local"):
        ratios = [float(b[3].strip("*")) for b in jn if b[3].strip("*")]
        reps = ((r.load("joins.json") or {}).get("summary") or {}).get("reps")
        loaded = any(LOAD_MARK in b[-1] for b in jn)
        how = ", ".join(x for x in (f"{reps} repetition(s)" if reps else "",
                                    f"at a load above {LOAD_LIMIT:g}" if loaded else "") if x)
        out.append(f"- Event-time windows: {et['summary']['ratio_local']:.2f}x Structured "
                   "Streaming" + (f"; stream-stream joins {min(ratios):.1f}x to "
                                  f"{max(ratios):.1f}x" + (f" ({how})" if how else "")
                                  if ratios else "") + ".")
    nx = rows("nexmark.json")
    if nx:
        vs = [b[4].strip("*") for b in nx]
        num = [float(v) for v in vs if v not in ("-", "")]
        marked = sum(LOAD_MARK in b[-1] for b in nx)
        data = r.load("nexmark.json")
        loads = [x for b in nx if (x := _nexmark_load(data, b)) is not None]
        where = (f"{marked} of the {len(nx)} rows taken at a load above {LOAD_LIMIT:g} (marked)"
                 if marked else f"every run started at a load average of {max(loads):.1f} or "
                 "less" if loads else "load not recorded")
        out.append(f"- Nexmark, one core per engine: ours (heap) at least Flink 2.3's rate (on "
                   f"a generated source) in {sum(v >= 1 for v in num)} of the {len(num)} "
                   f"queries both ran" + (f", {min(num):.1f}x to {max(num):.1f}x" if num else "")
                   + f"; {where}.")
    lat = [m for m in latency_medians(r.load("latency.json")) if m["rate"] == 100_000
           and m["job"] != "ss_aggregate"]
    over = r.load("checkpoint_overhead.json")
    rec = r.load("recovery.json")
    bits = []
    if lat:
        bits.append("p99 latency " + " and ".join(f"{m['p99']:.1f} ms ({m['job']})" for m in lat)
                    + " at 100,000 rows/s")
    if over and "aggregate" in over["summary"]:
        bits.append(f"1 s checkpoints keep {over['summary']['aggregate']['ratio_median']:.2f}x "
                    "the throughput without")
    if rec:
        bits.append(f"recovery at {rec['summary']['keys']:,} keys within "
                    f"{rec['summary']['recovery_s_max']:.2f} s")
    if bits:
        out.append("- " + "; ".join(bits) + ".")
    af = rows("Cut-overs through Airflow")
    dt = rows("downtime.json")
    if af:  # what a user sees in the sink, through Airflow, first
        exact = all(b[-2] == "0 / 0" for b in af)
        standby = [b for b in af if b[0] == downtime_airflow_labels["savepoint-standby"]]
        out.append("- A blue-green cut-over through Airflow stops the output for "
                   f"{af[0][2].split(' / ')[0].strip('*')} s (p50, real deployment on the "
                   "Spark cluster)"
                   + (f", a savepoint upgrade with a standby for "
                      f"{standby[0][2].split(' / ')[0].strip('*')} s" if standby else "")
                   + (", with no row lost or duplicated." if exact else
                      "; rows were lost or duplicated (table below)."))
    elif dt:
        exact = all(b[4] == "0 / 0" for b in dt)
        out.append("- Upgrades and blue-green cut-overs stop the output for "
                   + " and ".join(f"{b[2].split(' / ')[0]} s" for b in dt)
                   + " (p50) on the local runner"
                   + (", with no row lost or duplicated." if exact else
                      "; rows were lost or duplicated (table below)."))
    return out[:5]


METHODOLOGY = [
    "## Methodology", "",
    "- **Rates.** Our rate is records / (wall time minus the launch-to-running start-up), "
    "the final checkpoint and teardown included. Structured Streaming's is rows / summed "
    "`triggerExecution` of the measured micro-batches after the warm-up ones. Flink's is "
    "events / the job's net runtime after a warm-up job in the same JVM.",
    "- **Repetitions.** The engines of a comparison run back to back, interleaved, in the "
    "same run; a figure is the median of the repetitions and a ratio the median of the "
    "per-pair ratios, because this machine's speed drifts between minutes. The number of "
    "repetitions is in each command (`--reps`); one repetition where a table says so.",
    "- **Pinning.** Nexmark and the regular join pin every process of every engine, JVMs "
    "included, to one core (`taskset`); the other tables use both cores.",
    f"- **Load average.** Each row gives the 1-minute load average of its run (2 cores). A "
    f"row taken above {LOAD_LIMIT:g} says so in its load cell ({LOAD_MARK}): other work "
    "shared the machine and its absolute figures are noisy; ratios of the same run hold "
    "better. \"not recorded (quiet)\": a run on an otherwise idle machine whose load was "
    "not written down.",
    "- **Checkpoints.** Exactly-once, every 1 s unless a table says otherwise, included in "
    "every figure.", ""]

CAVEATS = [
    "## Caveats", "",
    "- A 2-core VM: absolute rates are this machine's; compare ratios of one run.",
    "- Nexmark: ours decodes Parquet files while Flink generates its events in SQL (the same "
    "distributions, not the same values; bench/nexmark/flink_gen.py says how); Flink's rate "
    "counts its job from submission to end, after a warm-up job in the same JVM. One run, "
    "one repetition per cell: `make bench-nexmark`.",
    "- Rows marked above 4 and one-repetition tables (joins, CDC, backpressure, downtime) "
    "are indicative: re-run them on a quiet machine before quoting absolute figures.",
    "- Each table is as of its date; the families were not all measured on the same day "
    "or commit. Earlier runs and the investigations behind them: `bench/HISTORY.md` in the "
    "repository.", ""]


def render_page(results_dir: str) -> list[str]:
    r = Results(results_dir)
    cond = conditions(results_dir)
    files = cond.get("files", {})
    sections, tables = [], {}
    for fam in FAMILIES:
        lines = fam.lines(r, files)
        if lines:
            sections += lines
            # the first family of a result file is its summary's (downtime.json has two)
            tables.setdefault(fam.name, [x for x in lines if x.startswith("|")])
            tables[fam.heading] = [x for x in lines if x.startswith("|")]
    dates = sorted(files[n]["measured_on"] for n in tables if files.get(n, {}).get("measured_on"))
    page = ["# Benchmarks", "",
            (f"Measured {dates[0]} to {dates[-1]}; this page is as of {dates[-1]}."
             if dates else "Dates not recorded.")
            + " Generated by `bench/write_benchmarks.py` from the result files in "
            "`bench/results/` (`make bench` and `make bench-nexmark` rewrite it).", "",
            machine_line(cond.get("machine", {})), "",
            "## Summary", ""]
    page += summary(r, tables) + [""] + METHODOLOGY + sections + CAVEATS
    while page and not page[-1]:
        page.pop()
    return page


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    args = ap.parse_args(argv)
    with open(args.output, "w") as f:
        f.write("\n".join(render_page(args.results_dir)) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
