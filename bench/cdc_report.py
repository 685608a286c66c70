"""The PostgreSQL CDC section of BENCHMARKS.md (from bench/results/cdc.json, bench/cdc.py)."""

from __future__ import annotations


def _f(value, spec=",.0f"):
    return "n/a" if value is None else f"{value:{spec}}"


def cdc_section(data: dict | None, lines: list[str]) -> None:
    if not data:
        return
    load = data.get("load_average_before") or [None]
    lines += [
        "## PostgreSQL CDC source: snapshot, changes/s and replication lag", "",
        f"Command: `.venv/bin/python {data['command']}`. A private PostgreSQL 15 "
        f"(`wal_level=logical`), `pgbench -i -s {data['scale']}`; the job captures "
        "`pgbench_accounts`, `_tellers` and `_branches`: PostgresCdcSource (2 subtasks: the "
        "stream and 4 snapshot splits) -> key_by -> pass-through (2) -> FileSink (2), 1 s "
        "checkpoints, local runner. Then `pgbench -R` (TPC-B: 3 captured updates per "
        "transaction, each a `-U`/`+U` pair) while the lag the source reports with every "
        "checkpoint is sampled. One run on a loaded machine (2 cores shared with other "
        f"work: load average {_f(load[0], '.1f')} when it started).", "",
        "| measure | value |", "|---|---|",
        f"| snapshot | {_f(data['snapshot_rows'])} rows in {_f(data['snapshot_s'], '.1f')} s "
        f"({_f(data['snapshot_rows_per_s'])} rows/s, end to end, first start included) |",
        f"| write load | {_f(data['pgbench_tps'])} pgbench tps (target {data['target_tps']}) "
        f"for {_f(data['load_seconds'])} s |",
        f"| changelog records/s emitted under that load | {_f(data['changes_per_s'])} |",
        f"| lag seconds (median / p99 / max over {data['checkpoints_sampled']} checkpoints) | "
        f"{_f(data['lag_seconds_median'], '.3f')} / {_f(data['lag_seconds_p99'], '.3f')} / "
        f"{_f(data['lag_seconds_max'], '.3f')} |",
        f"| lag bytes (median / max) | {_f(data['lag_bytes_median'])} / "
        f"{_f(data['lag_bytes_max'])} |", "",
        "The source keeps up with this load (the changes/s match the writes: the lag stays "
        "at one poll); it is not its ceiling. Lag seconds = now - commit time of the last "
        "transaction emitted (0 when caught up), lag bytes = server WAL end - the source's "
        "position, both as reported with the checkpoints. The upsert sinks (Delta, Iceberg, "
        "PostgreSQL) are measured with their own work.", ""]
