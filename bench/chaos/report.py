"""CHAOS.md: the table of every recorded chaos run (bench/results/chaos.jsonl), per cell:
runs, faults fired (kills and raised exceptions), where they landed, runs that did not
finish, rows that differ from the reference, and a replay command of a failing run."""

from __future__ import annotations

import calendar
import json
import os
import time
from collections import Counter, defaultdict

from .faults import LANDINGS
from .run import SETTINGS, UNFINISHED

SHORT = {
    "before-first-checkpoint": "pre",
    "during-checkpoint": "ckpt",
    "during-commit": "commit",
    "after-sources-ended": "end",
    "processing": "proc",
}


# The newest engine fix of a defect a chaos run found (FINDINGS.md 7, commit b2a1e57): the
# runs recorded after it ran code with every finding fixed. Move it with the next fix.
LAST_FIX = ("finding 7, commit b2a1e57", "2026-11-26 23:39:48")


# The Kafka cells' current shapes (FINDINGS 8 and 10): kafka-changelog's upsert sinks at
# parallelism 1 and the output read as Apache Kafka's read_committed (the records of aborted
# transactions the test broker returns are dropped), on committed code from this commit on.
KAFKA_SHAPES = ("3d4d514", "2026-12-06 11:34:30")


def _killed(r: dict) -> bool:
    """At least one SIGKILL (slot, Python worker, driver, JVM) fired in the run."""
    return any(f["fired_at"] and f["kind"] != "raise" for f in r["faults"])


def _unfinished(r: dict) -> bool:
    return r["status"] in (UNFINISHED, "TIMEOUT")


def _on_current_settings(r: dict) -> bool:
    """A run on the current settings (run.SETTINGS) of committed code: a ``+dirty`` revision
    ran on a working tree with uncommitted engine edits (others' half-moved modules)."""
    return (
        r.get("settings") == SETTINGS
        and not (r.get("revision") or "").endswith("+dirty")
        and not r.get("diagnostic")
    )


def _diagnostic(runs: list[dict]) -> str:
    """One line for the reproductions under non-default conditions (``--broker-threads``,
    ``--kafka-sum-shape``): not runs of their cells, not counted above."""
    if not runs:
        return ""
    kinds = Counter(", ".join(f"{k}={v}" for k, v in sorted(r["diagnostic"].items())) for r in runs)
    return (
        f"Reproductions under non-default conditions (FINDINGS), not counted above: "
        f"{len(runs)} runs ({'; '.join(f'{n} with {k}' for k, n in sorted(kinds.items()))}), "
        f"{sum(1 for r in runs if _killed(r))} killed runs, "
        f"{sum(1 for r in runs if r['differences'])} with committed rows that differ, "
        f"{sum(1 for r in runs if _unfinished(r))} unfinished."
    )


def _older(runs: list[dict]) -> str:
    """One line for the runs on other settings (before the harness ran every engine setting
    at its default), with those on the code with every finding of FINDINGS.md fixed."""
    if not runs:
        return ""
    what, at = LAST_FIX
    since = calendar.timegm(time.strptime(at, "%Y-%m-%d %H:%M:%S"))
    fixed = [r for r in runs if r.get("time", 0) >= since]
    last = time.strftime("%Y-%m-%d %H:%M", time.gmtime(max(r.get("time", 0) for r in runs)))
    return (
        "Earlier runs on other settings (`CKPT_HEARTBEAT_TIMEOUT_S=2` and a sleep of 2.5 s "
        "before a restart after a driver or JVM kill), "
        f"up to {last} UTC, not counted above: {len(runs)} runs, "
        f"{sum(1 for r in runs if _killed(r))} killed runs, "
        f"{sum(1 for r in runs if r['differences'])} with committed rows that differ, "
        f"{sum(1 for r in runs if _unfinished(r))} unfinished, "
        f"{sum(1 for r in runs if not r['ok'])} failed (the failures are FINDINGS.md's, "
        f"fixed); after the last fix ({what}, {at} UTC): {len(fixed)} runs, "
        f"{sum(1 for r in fixed if _killed(r))} killed runs, "
        f"{sum(1 for r in fixed if not r['ok'])} failed. Their per-cell table is in this "
        "file's git history."
    )


#: the families a current run is counted in (the first that matches), in the report's order
FAMILIES = (
    (
        "driver-kill cells (multi-query on Spark, every kill a driver SIGKILL)",
        lambda r: r["cell"].endswith("/driver-kills"),
    ),
    (
        "multi-query cells (several queries on one source)",
        lambda r: r.get("group") == "nexmark-multi",
    ),
    ("Kafka cells", lambda r: r.get("group") == "kafka"),
    ("CDC cells", lambda r: r.get("group") == "cdc"),
    ("Nexmark single-query cells", lambda r: r.get("group") == "nexmark"),
    ("other pipelines (joins, windows, sessions, ...)", lambda r: True),
)


def family(r: dict) -> str:
    return next(name for name, match in FAMILIES if match(r))


def _restarts(runs: list[dict]) -> str:
    """The restart delays of the driver and JVM kills (faults.restart_delay), per runner,
    beside a fresh driver's start-up in the same runs (``start_s``: the first driver's
    launch to its first attempt): a restart that waited for the job name would take longer
    than a start; one that is refused ends the new driver (a failed run)."""
    parts = []
    for runner in ("local", "spark"):
        rs = [r for r in runs if r["runner"] == runner]
        kills = [
            f for r in rs for f in r["faults"] if f["fired_at"] and f["kind"] in ("driver", "jvm")
        ]
        if not kills:
            continue
        delays = [f["restarted_s"] for f in kills if f.get("restarted_s") is not None]
        starts = [
            r["start_s"]
            for r in rs
            if r.get("start_s") is not None and any(f in kills for f in r["faults"])
        ]
        part = (
            f"{runner}: {len(kills)} kills, the next attempt started a median "
            f"{_median(delays):.1f} s (max {max(delays, default=0):.1f} s) after the kill, "
            f"{sum(1 for d in delays if d > 5)} of {len(delays)} later than 5 s"
        )
        if starts:
            part += (
                f"; the first driver of the same runs took a median {_median(starts):.1f} s "
                f"(max {max(starts):.1f} s) from launch to its first attempt"
            )
        parts.append(part)
    if not parts:
        return ""
    return (
        "Driver and Spark JVM kills (the harness starts a new driver at once with "
        '`restore="latest"`, no wait for a heartbeat; a refused job name would end it with '
        "`JobNameInUseError`, a failed run): "
        + "; ".join(parts)
        + ". A restart's time is the new driver's own start-up (Python, on Spark its "
        "SparkSession) on the loaded machine and, after a JVM kill, the old driver's end."
    )


def _current_summary(cur: list[dict], excluded: int) -> list[str]:
    """The top of the report: the runs on the current settings, by family."""
    killed = [r for r in cur if _killed(r)]
    revs = [r.get("revision") for r in sorted(cur, key=lambda r: r.get("time", 0))]
    revs = list(dict.fromkeys(x for x in revs if x))
    when = [r.get("time", 0) for r in cur]
    span = (
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(min(when)))} to "
        f"{time.strftime('%H:%M', time.gmtime(max(when)))} UTC"
        if when
        else "none yet"
    )
    commits = (
        f"commit {revs[0]}"
        if len(revs) == 1
        else f"commits {revs[0]} to {revs[-1]} ({len(revs)} commits)"
        if revs
        else "no commit"
    )
    lines = [
        "## Default settings (the current runs)",
        "",
        f"**{len(killed)} killed runs on the default settings: "
        f"{sum(1 for r in killed if r['differences'])} with committed rows that differ from "
        f"the reference, {sum(1 for r in killed if _unfinished(r))} unfinished, "
        f"{sum(1 for r in killed if not r['ok'])} failed.** All runs on these settings: "
        f"{len(cur)} ({sum(1 for r in cur if r['differences'])} differ, "
        f"{sum(1 for r in cur if _unfinished(r))} unfinished, "
        f"{sum(1 for r in cur if not r['ok'])} failed) in {len({r['cell'] for r in cur})} "
        f"cells, {commits}, {span}.",
        "",
        "Default settings: the harness sets no `CKPT_*` variable (it drops any the caller "
        "exported, bench/chaos/run.py `driver_env`) and no engine option beyond the job's own "
        "(its state backend and checkpoint mode per cell, a 200 ms checkpoint interval, "
        "parallelism 2, a restart strategy of 10 attempts): the heartbeat timeout, buffer "
        "debloating and every other setting at their defaults. Each record says "
        f'`"settings": "{SETTINGS}"` and its `revision`.'
        + (
            f" {excluded} runs on a working tree with uncommitted engine edits (revision "
            "`+dirty`) are not counted."
            if excluded
            else ""
        ),
        "",
        "| family | cells | runs | killed runs | differ | unfinished | failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, _ in FAMILIES:
        rs = [r for r in cur if family(r) == name]
        if rs:
            lines.append(
                f"| {name} | {len({r['cell'] for r in rs})} | {len(rs)} "
                f"| {sum(1 for r in rs if _killed(r))} "
                f"| {sum(1 for r in rs if r['differences'])} "
                f"| {sum(1 for r in rs if _unfinished(r))} "
                f"| {sum(1 for r in rs if not r['ok'])} |"
            )
    kafka = _kafka_since(cur)
    if kafka:
        lines += ["", kafka]
    by = Counter(f"{r['runner']}/{r['backend']}/{r['mode']}" for r in killed)
    lines += [
        "",
        "Killed runs by runner/backend/mode: "
        + ", ".join(f"{k} {by[k]}" for k in sorted(by))
        + ".",
    ]
    restarts = _restarts(cur)
    if restarts:
        lines += ["", restarts]
    return lines


def _kafka_since(cur: list[dict]) -> str:
    """One line for the Kafka runs in the cells' current shapes (:data:`KAFKA_SHAPES`)."""
    commit, at = KAFKA_SHAPES
    since = calendar.timegm(time.strptime(at, "%Y-%m-%d %H:%M:%S"))
    rs = [r for r in cur if r.get("group") == "kafka" and r.get("time", 0) >= since]
    if not rs:
        return ""
    hidden = [r for r in rs if r.get("aborted_hidden")]
    runners = Counter(r["runner"] for r in rs)
    return (
        f"Kafka cells in their current shapes (since commit {commit}, {at[:16]} UTC: "
        "kafka-changelog's upsert sinks at parallelism 1, the output read as Apache "
        f"Kafka's `read_committed` would, FINDINGS 8 and 10): {len(rs)} runs "
        f"({', '.join(f'{n} {k}' for k, n in sorted(runners.items()))}), "
        f"{sum(1 for r in rs if _killed(r))} killed runs, "
        f"{sum(1 for r in rs if r['differences'])} with committed rows that differ, "
        f"{sum(1 for r in rs if _unfinished(r))} unfinished, "
        f"{sum(1 for r in rs if not r['ok'])} failed; in {len(hidden)} of them the harness "
        f"dropped {sum(sum(r['aborted_hidden'].values()) for r in hidden)} records of "
        "aborted transactions that the test broker returned to `read_committed`."
    )


def load(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] + xs[(n - 1) // 2]) / 2 if xs else 0.0


def _cost(runs: list[dict]) -> str:
    """What a run costs: median wall and CPU seconds of the local runs that record CPU."""
    metered = [r for r in runs if r.get("cpu_seconds") is not None and r["runner"] == "local"]
    before = [
        r["seconds"]
        for r in runs
        if r.get("cpu_seconds") is None
        and r["runner"] == "local"
        and not r.get("recorded_by_hand")  # no measurement of its own (FINDINGS 8)
    ]
    if not metered:
        return ""
    return (
        f"Per local run (median): {_median([r['seconds'] for r in metered]):.0f} s wall and "
        f"{_median([r['cpu_seconds'] for r in metered]):.0f} CPU s over {len(metered)} runs "
        "that record their CPU (every process of their drivers' sessions, bench/chaos/cpu.py)"
        + (
            f"; the {len(before)} earlier local runs took a median "
            f"{_median(before):.0f} s wall (their CPU was not recorded)."
            if before
            else "."
        )
        + " Wall time depends on the machine's load (other sessions' tests ran meanwhile)."
    )


def _later_replays(failed: dict, runs: list[dict]) -> str:
    """`` Replayed later: ok (2026-11-26 22:10)`` for the replays of a failing run's seed."""
    replays = [
        r
        for r in runs
        if r["cell"] == failed["cell"]
        and r["seed"] == failed["seed"]
        and r.get("time", 0) > failed.get("time", 0)
    ]
    if not replays:
        return ""
    return (
        " Replayed later: "
        + ", ".join(
            f"{'ok' if r['ok'] else r['status']}"
            f" ({time.strftime('%Y-%m-%d %H:%M', time.gmtime(r.get('time', 0)))})"
            for r in replays
        )
        + "."
    )


def write_report(results: str, report: str) -> None:
    every = load(results)
    # a run whose drivers could not import their modules (the shared venv was being
    # reinstalled) says nothing about the engine: counted apart, not in the table
    valid = [r for r in every if not r.get("environment")]
    broken = len(every) - len(valid)
    # the table and the counts are of the runs on the current settings; older runs on
    # other settings are one line
    runs = [r for r in valid if _on_current_settings(r)]
    diagnostic = [r for r in valid if r.get("diagnostic")]
    rest = [r for r in valid if not r.get("diagnostic")]
    dirty = [r for r in rest if r.get("settings") == SETTINGS and r not in runs]
    older = [r for r in rest if r.get("settings") != SETTINGS]
    by_cell: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        by_cell[r["cell"]].append(r)
    kills = sum(1 for r in runs for f in r["faults"] if f["fired_at"] and f["kind"] != "raise")
    raises = sum(1 for r in runs for f in r["faults"] if f["fired_at"] and f["kind"] == "raise")
    failed = [r for r in runs if not r["ok"]]
    landed = Counter(f["landed"] for r in runs for f in r["faults"] if f["fired_at"])
    lines = [
        "# Chaos matrix",
        "",
        "Generated by `python -m bench.chaos` (bench/chaos/; `make chaos`) from "
        f"`{os.path.relpath(results, os.path.dirname(os.path.abspath(report)))}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        *_current_summary(runs, len(dirty)),
        "",
        _older(older),
        "",
        _diagnostic(diagnostic),
        "",
        f"SIGKILLs fired in the current runs: {kills}; raised exceptions: {raises}."
        + (
            f" {broken} runs (of any settings) failed because of the harness's environment "
            "(the shared virtualenv or working tree being changed meanwhile: "
            "`ModuleNotFoundError`; CDC runs blocked by a prepared transaction or a "
            "replication slot an earlier run had left in the harness's PostgreSQL server, "
            "finding 7); they are not counted."
            if broken
            else ""
        ),
        "",
        _cost(runs),
        "",
        "Where the faults landed: " + ", ".join(f"{k} {landed.get(k, 0)}" for k in LANDINGS) + ".",
        "",
        "## The current runs per cell",
        "",
        "A cell is `pipeline/runner/backend/mode`. Reference: `duckdb` (Nexmark: DuckDB SQL "
        "written from the query texts, bench/chaos/reference_duckdb.py) or `failure-free` (the "
        "same pipeline run once without faults) or `source-table` (CDC: the source table, or "
        "its GROUP BY, once the job caught up with the writers; the job is then cancelled). "
        "Faults per run: 1-3 drawn from the seed "
        "(SIGKILL of a slot process / Spark Python worker, SIGKILL of the driver or the "
        "Spark JVM then "
        '`restore="latest"`, an exception raised at a seeded input position). Landings: '
        "pre = before the first checkpoint, ckpt = during a checkpoint (alignment, snapshot), "
        "commit = after a checkpoint completed, before its files were published, end = after "
        "the sources ended (final checkpoint triggered), proc = between checkpoints. "
        "Differences: rows missing / in excess against the reference, summed over the runs.",
        "",
        "| cell | ref | runs | ok | kills | raises | landed (pre/ckpt/commit/end/proc) "
        "| not finished | missing | extra | replay of a failing run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    from .catalogue import CATALOGUE

    order = {name: i for i, name in enumerate(CATALOGUE)}
    for cell in sorted(by_cell, key=lambda c: (order.get(c.split("/")[0], 999), c)):
        rs = by_cell[cell]
        fired = [f for r in rs for f in r["faults"] if f["fired_at"]]
        where = Counter(f["landed"] for f in fired)
        bad = [r for r in rs if not r["ok"]]
        missing = sum(d["missing"] for r in rs for d in r["differences"].values())
        extra = sum(d["extra"] for r in rs for d in r["differences"].values())
        # a CDC job (reference source-table) is unbounded: the harness cancels it
        unfinished = sum(
            1
            for r in rs
            if r["status"] != ("CANCELED" if r.get("reference") == "source-table" else "FINISHED")
        )
        ref = rs[0].get("reference") or (
            "duckdb" if rs[0]["group"] == "nexmark" else "failure-free"
        )
        lines.append(
            f"| {cell} | {ref} | {len(rs)} | {len(rs) - len(bad)} "
            f"| {sum(1 for f in fired if f['kind'] != 'raise')} "
            f"| {sum(1 for f in fired if f['kind'] == 'raise')} "
            f"| {'/'.join(str(where.get(k, 0)) for k in LANDINGS[:4])}/{where.get('processing', 0)} "
            f"| {unfinished} | {missing} | {extra} "
            f"| {('`' + bad[0]['replay'] + '`') if bad else ''} |"
        )
    if failed:
        lines += ["", "## Failing runs (current settings)", ""]
        for r in failed[:60]:
            why = (r.get("failure_reason") or "").replace("\n", " ")[:300]
            diffs = "; ".join(
                f"{p}: counts lost"
                if d.get("counts_lost")
                else f"{p}: {d['missing']} missing, {d['extra']} extra of {d['expected']}"
                for p, d in r["differences"].items()
            )
            known = (
                f" (known: {r['known']})"
                if r.get("known") and "unhashable type" in (r.get("failure_reason") or "")
                else ""
            )
            later = _later_replays(r, runs)
            # a Kafka run's look at the broker (kafka_state.py): whose the difference is
            broker = (r.get("broker_state") or {}).get("verdict")
            lines.append(
                f"- `{r['cell']}` seed {r['seed']}: {r['status']}{known}. {why} {diffs}".rstrip()
                + (f" The broker after the run: {broker}." if broker else "")
                + later
            )
    findings = os.path.join(os.path.dirname(os.path.abspath(__file__)), "FINDINGS.md")
    if os.path.exists(findings):  # hand-written: what the failing runs showed
        with open(findings) as f:
            lines += ["", f.read().rstrip()]
    with open(report, "w") as f:
        f.write("\n".join(lines) + "\n")
