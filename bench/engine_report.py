"""The BENCHMARKS.md sections of the engine measured alone (bench/write_benchmarks.py calls
them in order): latency, checkpointing overhead and scaling, per-record state backends,
recovery, aligned vs unaligned checkpoints, exactly-once sinks, peak memory, the scaling
sheet and the profiles."""

from __future__ import annotations

import statistics
from collections import defaultdict

from jobs import p99
from report_common import Results, fmt, table


def latency_medians(data: dict | None) -> list[dict]:
    """Per job and rate: the medians over repetitions (older files: their single runs)."""
    if not data:
        return []
    return data["summary"].get("medians") or [dict(run, reps=1) for run in data["runs"]]


def latency_section(r: Results, lines: list[str]) -> None:
    data = r.load("latency.json")
    if not data:
        return
    s = data["summary"]
    lines += [f"## End-to-end latency ({s['keys']:,} keys, parallelism 2, checkpoints every 1 s)", "",
              f"Command: `.venv/bin/python bench/latency.py --seconds {s['seconds']:g} --reps "
              f"{s['reps']}`. The "
              "source stamps each record with its generation time at a fixed offered rate; the "
              "sink takes now - stamp for every row it receives (the `aggregate` job's output "
              "row carries max(stamp) of the records folded into it). "
              f"{s['seconds']:g} s measured per run after a {s['warmup_s']:g} s warm-up, "
              "checkpoints included.", "",
              "`ss_aggregate` is Structured Streaming's groupBy(key).agg(count, sum) at the same "
              "offered rate with a 1 s trigger (it checkpoints every micro-batch, as we do every "
              "1 s), estimated from its own batch durations: a row waits 0..1 s for its trigger, "
              "then its batch's triggerExecution. SS's latency floor is its batch duration, "
              "which a shorter trigger cannot go below. `applyInPandasWithState` sustains a few "
              "thousand rows/s, so at these rates its latency grows without bound.", "",
              "Medians over the repetitions; the last column is the worst repetition's p99.", ""]
    lines += table(["job", "offered rows/s", "p50 (ms)", "p90", "p99", "p99.9", "max",
                    "worst p99"],
                   ([m["job"], f"{m['rate']:,}", m["p50"], m["p90"], m["p99"], m["p99.9"],
                     m["max"], m.get("p99_worst", m["p99"])] for m in latency_medians(data)))
    lines.append("")


def overhead_section(r: Results, lines: list[str]) -> None:
    data = r.load("checkpoint_overhead.json")
    if not data:
        return
    any_s = next(iter(data["summary"].values()))
    lines += [f"## Checkpointing overhead (local runner, parallelism 2, {any_s['keys']:,} keys, "
              f"{any_s['reps']} interleaved reps)", "",
              f"Command: `.venv/bin/python bench/checkpoint_overhead.py --reps {any_s['reps']} "
              f"--keys {any_s['keys']} --aggregate-records "
              f"{data['summary'].get('aggregate', {}).get('records')} --running-sum-records "
              f"{data['summary'].get('running_sum', {}).get('records')}`", ""]
    lines += table(["job", "rep", "no checkpoints (rec/s)", "checkpoints every 1 s (rec/s)",
                    "ratio", "checkpoints", "durations (ms)"],
                   ([job, i, f"{run['off']['records_per_s']:,.0f}",
                     f"{run['on']['records_per_s']:,.0f}", f"{run['ratio']:.2f}",
                     run["on"]["checkpoints"], ", ".join(str(d) for d in run["on"]["durations_ms"])]
                    for job, runs in data["runs"].items() for i, run in enumerate(runs)))
    lines.append("")
    for job, s in data["summary"].items():
        lines.append(f"- `{job}` ({s['records']:,} records): median {s['off_records_per_s']:,.0f} "
                     f"rec/s without, {s['on_records_per_s']:,.0f} rec/s with checkpoints; pairwise "
                     f"ratio median **{s['ratio_median']:.2f}**; checkpoint p50 "
                     f"{s['checkpoint_ms_p50']} ms, p99 {s['checkpoint_ms_p99']} ms.")
    lines.append("")


def scaling_section(r: Results, lines: list[str]) -> None:
    data = r.load("checkpoint_scaling.json")
    if not data:
        return
    reps = data["summary"][0]["reps"]
    keys = ",".join(str(s["keys"]) for s in data["summary"])
    lines += ["## Checkpoint duration and size by state size (aggregate job)", "",
              f"Command: `.venv/bin/python bench/checkpoint_scaling.py --keys {keys} --reps {reps}` "
              "(local runner, parallelism 2, checkpoints every 1 s; duration = trigger to "
              "completion at the coordinator, including alignment; size = checkpointed bytes, "
              "zstd-compressed Arrow IPC).", ""]
    lines += table(["keys", "records", "checkpoints", "p50 (ms)", "p99 (ms)", "max (ms)",
                    "bytes per checkpoint (median)", "largest (MB)", "rec/s",
                    "peak RSS per slot (MB)"],
                   ([f"{s['keys']:,}", f"{s['records']:,}", s["checkpoints"],
                     s["checkpoint_ms_p50"], s["checkpoint_ms_p99"], s["checkpoint_ms_max"],
                     fmt(s["bytes_median"] and s["bytes_median"] / 1e6, ".2f", " MB"),
                     fmt(s["bytes_max"] and s["bytes_max"] / 1e6, ".2f"),
                     fmt(s["records_per_s"]), fmt(s["peak_rss_mb"], ".0f")]
                    for s in data["summary"]))
    lines.append("")


def state_section(r: Results, lines: list[str]) -> None:
    data = r.load("state_backends.json")
    if not data:
        return
    reps = max(x.get("rep", 0) for x in data) + 1
    keys = ",".join(str(k) for k in sorted({x["keys"] for x in data}))
    lines += ["## Snapshot cost of the per-record state backends (1% of keys updated between "
              "checkpoints)", "",
              f"Command: `.venv/bin/python bench/state_backends.py --keys {keys} --reps {reps}` "
              "(one job per backend and key count, parallelism 1, local runner: a per-record "
              "function keeps a value per key, every key is written once, then 5 rounds each "
              "update 1% of the keys, each round in its own checkpoint; per checkpoint, from "
              "the metadata DB's `task_stats` of the keyed task: the synchronous part, which "
              "blocks the task, then the asynchronous write to local disk; the first, full "
              "checkpoint is excluded. The backends alone: tools/microbench/state_backends.py).",
              ""]
    groups = defaultdict(list)
    for x in data:
        groups[(x["keys"], x["backend"])].extend(x["checkpoints"][1:])
    rows = []
    for (keys, backend), cps in sorted(groups.items()):
        sync = [c["sync_ms"] for c in cps]
        total = [c["sync_ms"] + c["async_ms"] for c in cps]
        size = statistics.median(c["state_size"] for c in cps)
        sent = statistics.median(c["uploaded"] for c in cps)
        rows.append([f"{keys:,}", backend, f"{statistics.median(sync):.1f}", f"{p99(sync):.1f}",
                     f"{statistics.median(c['async_ms'] for c in cps):.1f}", f"{p99(total):.1f}",
                     f"{size / 1e6:.2f}", f"{sent / 1e6:.3f}", f"{sent / size:.3f}"])
    lines += table(["keys", "backend", "sync p50 (ms)", "sync p99 (ms)", "async p50 (ms)",
                    "total p99 (ms)", "full state (MB)", "written per checkpoint (MB)",
                    "written / full"], rows)
    lines.append("")


def recovery_section(r: Results, lines: list[str]) -> None:
    data = r.load("recovery.json")
    if not data:
        return
    s = data["summary"]
    lines += [f"## Recovery at {s['keys']:,} keys", "",
              f"Command: `.venv/bin/python bench/recovery.py --keys {s['keys']} --records "
              f"{s['records']} --reps {s['reps']}` (aggregate job, local runner, parallelism 2, "
              f"checkpoints every 1 s, failure injected at record {s['fail_at']:,}; recovery = "
              "failure to the first aggregated batch of the restarted attempt; restart = job "
              "master's launch of new slots until every task restored its state and runs).", ""]
    lines += table(["rep", "recovery (s)", "restart to running (s)", "restored checkpoint (MB)",
                    "checkpoint durations (ms)"],
                   ([i, fmt(run["recovery_s"], ".2f"), fmt(run["startup_after_failure_s"], ".2f"),
                     f"{max(run['state_bytes'], default=0) / 1e6:.1f}",
                     ", ".join(str(d) for d in run["durations_ms"])]
                    for i, run in enumerate(data["runs"])))
    lines += ["", f"Median recovery **{fmt(s['recovery_s_median'], '.2f')} s**, worst "
              f"{fmt(s['recovery_s_max'], '.2f')} s.", ""]


def unaligned_section(r: Results, lines: list[str]) -> None:
    data = r.load("unaligned.json")
    if not data:
        return
    lines += ["## Aligned vs unaligned checkpoints under backpressure", "",
              f"Command: `.venv/bin/python {data['command']}`. Generator ({data['rate']:,.0f} "
              "rows/s, 2 subtasks) -> key_by -> per-record running sum (2) -> key_by -> a sink "
              f"throttled to {data['rate'] * 0.1:,.0f} rows/s (2): every mailbox and socket "
              "buffer in front of the sink is full. Checkpoint every 1 s; "
              f"{data['seconds']:.0f} s per configuration, the first third not measured. "
              "Duration = trigger to completion. In flight = bytes of records the unaligned "
              "checkpoint persisted as channel state (sum over tasks).", ""]
    lines += table(["batch size", "mode", "checkpoints", "p50 (ms)", "p99 (ms)", "expired",
                    "in flight p50", "in flight max"],
                   ([run["batch_size"], run["mode"], run["completed"], fmt(run["p50_ms"]),
                     fmt(run["p99_ms"]), run["failed"],
                     f"{(run['inflight_p50'] or 0) / 1e3:,.0f} KB",
                     f"{run['inflight_max'] / 1e3:,.0f} KB"] for run in data["runs"]))
    lines += ["", "Aligned checkpoints take as long as the backlog in front of the sink takes "
              "to drain (it grows with the batch size: more rows per queued item); unaligned "
              "ones do not wait for it. What is left of their duration is mostly the sink "
              "finishing the batch it is writing before it takes the barrier.", ""]


def sinks_section(r: Results, lines: list[str]) -> None:
    data = r.load("sinks.json")
    if not data:
        return
    lines += ["## Exactly-once sinks: throughput and commit latency", "",
              f"Command: `.venv/bin/python {data['command']}`. Generator (Arrow batches of "
              f"`id`, `key`, `value`; 2 subtasks) -> sink (2 subtasks), "
              f"{data['records']:,} records, 1 s checkpoints, local runner; medians of "
              f"{data['reps']} interleaved repetitions. Throughput = records / (wall time - "
              "slot start-up); commit latency = the sink's commit per subtask and checkpoint "
              "(on the checkpoint's completion), timed in the slot process.", ""]
    lines += table(["sink", "rows/s", "commit p50 (ms)", "commit p99 (ms, worst repetition)"],
                   ([sink, fmt(s["rows_per_s"]), fmt(s["commit_ms_p50"], ".1f"),
                     fmt(s["commit_ms_p99"], ".1f")] for sink, s in data["summary"].items()))
    lines += ["", "The file sink turns Arrow batches into JSON lines record by record; the "
              "PostgreSQL sink `COPY`s each batch into the open transaction, so its commit is "
              "only `COMMIT PREPARED`. The Delta and Iceberg sinks write one Parquet file per "
              "epoch at the barrier and do the table commit on completion: it reads the staged "
              "file back and writes the table's data file (two writes), and two subtasks "
              "committing at once retry on the table's optimistic concurrency (Iceberg's p99).",
              ""]


def scaling_sheet_section(r: Results, lines: list[str]) -> None:
    data = r.load("scaling.json")
    if not data:
        return
    s = data["summary"]
    lines += ["## Scaling sheet (local runner, 1 s checkpoints)", "",
              f"Command: `.venv/bin/python bench/scaling.py --reps {s['reps']}`. Sustained "
              "records/s (start-up excluded). `aggregate`: string keys, Arrow batches "
              f"(default 65,536 rows), {s['records']:,} records; `running_sum`: the per-record job, "
              f"{s['running_sum_records']:,} records. On 2 cores, parallelism 2 runs two slot "
              "processes on the two cores; parallelism 1 leaves a core for the job master and "
              "the kernel's loopback traffic.", "",
              "The last column is the Spark runner at parallelism 2 against a standalone master "
              "and 2 workers on 127.0.0.1 (one executor per worker, each slot in its own "
              "executor's Python worker), on the same 2 cores.", ""]
    par, rows = s["parallelism"], []
    for job in ("aggregate", "running_sum"):
        one, two = par.get(f"{job} p=1"), par.get(f"{job} p=2")
        ratio = f"{two / one:.2f}" if one and two else "n/a"
        cluster = par.get(f"{job} p=2, standalone cluster")
        rows.append([job, fmt(one), fmt(two), ratio, fmt(cluster) if cluster else "not run"])
    lines += table(["job", "parallelism 1", "parallelism 2", "p2 / p1", "p2, standalone cluster"],
                   rows)
    lines += ["", "Cost by number of keys (`aggregate`, parallelism 2). Network: bytes the "
              "loopback interface carried per record that crossed between the two slot "
              "processes (half of them; TCP/IP headers and control traffic included), against "
              "the Arrow IPC payload per row of one batch: "
              f"{s['ipc_bytes_per_row']['string keys']:.1f} B (string keys), "
              f"{s['ipc_bytes_per_row']['int64 keys']:.1f} B (int64 keys). Across hosts the "
              "same bytes would go over the network; a 1 Gbit/s link carries ~125 MB/s, i.e. "
              "that many bytes / (bytes per record) records/s per direction.", ""]
    lines += table(["keys", "records/s", "largest checkpoint (bytes)", "slowest checkpoint (ms)",
                    "network bytes per crossing record"],
                   ([f"{int(keys):,}", fmt(row["records_per_s"]), fmt(row["largest_state_bytes"]),
                     fmt(row["slowest_checkpoint_ms"]), fmt(row["bytes_per_crossing_record"], ".1f")]
                    for keys, row in s["keys"].items()))
    lines.append("")


def profile_section(r: Results, lines: list[str]) -> None:
    before = r.load("profile_running_sum_before.json")
    after = r.load("profile_aggregate.json")
    now = r.load("profile_running_sum.json")
    if not (before or after):
        return
    lines += ["## Where the time goes (py-spy, every slot process)", "",
              "Command: `.venv/bin/python bench/hotspots.py --job aggregate --records 3000000 "
              "--batch-size 8192 --interval-ms 1000` (and `--job running_sum --records 300000 "
              "--interval-ms 1000`): samples of the slots' task and channel threads while they work "
              "(waits excluded), by the function on top of the stack.", ""]
    for title, data in (("Before: keyed count/sum as a per-record KeyedProcessFunction, msgpack "
                         "dict batches on the wire (engine before the vectorized path)", before),
                        ("After: the same count/sum with the built-in vectorized aggregate() "
                         "and Arrow batches", after),
                        ("The per-record path today", now)):
        if not data:
            continue
        lines += [f"{title} ({data['records']:,} records, {data['keys']:,} keys):", "",
                  "| share | function |", "|---|---|"]
        lines += [f"| {row['share']:.1%} | `{row['function']}` |" for row in data["top"][:8]]
        lines.append("")
