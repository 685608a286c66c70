"""The PostgreSQL CDC section of BENCHMARKS.md (from bench/results/cdc.json, bench/cdc.py):
one row per sink (``runs``), or the single FileSink run of the earlier format."""

from __future__ import annotations


def _f(value, spec=",.0f"):
    return "n/a" if value is None else f"{value:{spec}}"


def _backlog(r: dict) -> str:
    """changes/s (seconds); a lower bound, start-up included, when the restored job's first
    checkpoint already held the whole backlog."""
    if r.get("backlog_changes_per_s") and r.get("backlog_emitted_s"):
        return f"{_f(r['backlog_changes_per_s'])} ({_f(r.get('backlog_in_target_s'), '.1f')})"
    return (f">= {_f(r['backlog_changes'] / r['backlog_s_from_restore'])} (all in the first "
            f"checkpoint, {_f(r['backlog_s_from_restore'], '.1f')} s from restore)")


def cdc_section(data: dict | None, lines: list[str]) -> None:
    if not data:
        return
    if "runs" not in data:
        _single_run(data, lines)
        return
    runs = data["runs"]
    loads = [la[0] for r in runs.values() for la in r["load_averages"]]
    some = next(iter(runs.values()))
    lines += [
        "## PostgreSQL CDC end to end: snapshot, changes/s and replication lag per sink", "",
        f"Command: `.venv/bin/python {data['command']}`. A private PostgreSQL 15 "
        f"(`wal_level=logical`); per sink a fresh database with `pgbench -i -s {data['scale']}`; "
        "the job captures `pgbench_accounts` (key `aid`): PostgresCdcSource (2 subtasks: the "
        "stream and 4 snapshot splits) -> key_by(aid) -> pass-through (2) -> sink (2), 1 s "
        "checkpoints, local runner. Sinks: the exactly-once FileSink (the changelog), and "
        "`mode=\"upsert\", key=[\"aid\"]` into PostgreSQL (a table in another database of the "
        "same server), Delta (local) and Iceberg (SQL catalog on SQLite, local warehouse). "
        f"Snapshot: {some['snapshot_rows']:,} rows, from submission (start-up included) to the "
        "first checkpoint holding all of them (Delta and Iceberg tables show them with the "
        f"commits after it). Steady load: `pgbench -R {some['target_tps']}` for "
        f"{_f(some['load_seconds'])} s (TPC-B: one captured account update, a `-U`/`+U` pair, "
        "per transaction); lag as the source reports it with every checkpoint. Backlog: the "
        f"job stops with a savepoint, pgbench commits {some['backlog_changes'] // 2:,} "
        "transactions, the job restores; changes/s = the backlog's changelog records after "
        "the last completed checkpoint holding at most a tenth of them / the time from that "
        "checkpoint until the sink's table shows all of them (polled every 0.1 s; FileSink: "
        "the completion of the checkpoint holding them). One run per sink on "
        f"a loaded machine ({data.get('cpu_count')} cores shared with other work: 1-minute load "
        f"average {min(loads):.1f} to {max(loads):.1f} during the runs): a floor, not a "
        "capacity.", "",
        "| sink | snapshot rows/s | changes/s under load (pgbench tps) | lag s median / max | "
        "lag bytes max | backlog changes/s (s) | table behind the checkpoint (s) | "
        "target = source |",
        "|---|---|---|---|---|---|---|---|"]
    for sink, r in runs.items():
        match = {True: "yes", False: "NO", None: "(changelog)"}[r["target_matches_source"]]
        lines.append(
            f"| {sink} | {_f(r['snapshot_rows_per_s'])} | {_f(r['changes_per_s_under_load'])} "
            f"({_f(r['pgbench_tps'])}) | {_f(r['lag_seconds_median'], '.3f')} / "
            f"{_f(r['lag_seconds_max'], '.3f')} | {_f(r['lag_bytes_max'])} | "
            f"{_backlog(r)} | "
            f"{_f(r.get('target_caught_up_s_after_checkpoint'), '.1f')} | {match} |")
    lines += [
        "", "Lag seconds = now - commit time of the last transaction emitted (0 when caught "
        "up), lag bytes = server WAL end - the source's position, both as reported with the "
        "checkpoints. Table behind the checkpoint: from the completion of the checkpoint "
        "holding the backlog until the table showed it (Delta's MERGE and Iceberg's "
        "copy-on-write run at the commit that follows the completion). Target = source: row "
        "count and sum of balances of the sink's table against `pgbench_accounts` at the end. The end-to-end exactly-once tests "
        "(`tests/integration/engine/connectors/test_cdc_upsert.py`) compare row for row.", ""]


def _single_run(data: dict, lines: list[str]) -> None:
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
        f"{_f(data['lag_bytes_max'])} |", ""]
