"""The BENCHMARKS.md section of bench/upsert_sinks.py's results (upsert_sinks.json)."""

from __future__ import annotations


def _fmt(v, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def render(data: dict) -> list[str]:
    loads = [r["load_avg_1m"] for r in data["runs"]]
    lines = ["## Upsert sinks: changes per second", "",
             f"Command: `.venv/bin/python {data['command']}`. Generator (Arrow batches, 2 "
             "subtasks) -> `map_batches` making each row a change of its key (`-D` for a tenth "
             "of the rows, `+U` otherwise) -> `key_by(\"key\")` -> upsert sink (`mode=\"upsert\"`, "
             f"key `key`, 2 subtasks); {data['records']:,} changes over {data['keys']:,} keys, "
             f"1 s checkpoints, local runner, {data['reps']} repetition(s). Changes/s = changes "
             "/ (wall time - slot start-up); commit = the sink's commit per subtask and "
             "checkpoint, timed in the slot process. The machine was shared with other jobs: "
             f"1-minute load average {min(min(x) for x in loads):.1f} to "
             f"{max(max(x) for x in loads):.1f} during the runs on {data.get('cpu_count')} CPUs "
             "(numbers are a floor, not a capacity).", "",
             "| sink | changes/s | commit p50 (ms) | commit p99 (ms) |", "|---|---|---|---|"]
    for sink, s in data["summary"].items():
        lines.append(f"| {sink} | {_fmt(s['changes_per_s'])} | {_fmt(s['commit_ms_p50'], '.1f')} "
                     f"| {_fmt(s['commit_ms_p99'], '.1f')} |")
    lines += ["", "Each checkpoint's changes are compacted per key in the sink subtask, then "
              "applied in one transaction: PostgreSQL runs `INSERT ... ON CONFLICT` / `DELETE` "
              "at the barrier inside the transaction it prepares (its commit is only `COMMIT "
              "PREPARED`); Delta stages the compacted epoch and runs one `MERGE` on completion "
              "(a join against the table: it rewrites the files holding the keys); Iceberg "
              "deletes the epoch's keys copy-on-write and appends, and two subtasks committing "
              "at once retry.", ""]
    return lines
