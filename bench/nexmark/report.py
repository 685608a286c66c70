"""The Nexmark tables from ``nexmark.json`` (bench/nexmark/run.py): :func:`render` gives the
full section (every interval, fair Flink, targets, recovery); bench/write_benchmarks.py takes
its per-query table into BENCHMARKS.md. ``python bench/nexmark/report.py`` rewrites the page.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

HEADING = "## Nexmark"
NOTES = os.path.join(HERE, "NOTES.md")


def _fmt(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _ratio(a, b) -> str:
    return "-" if not a or not b else f"**{a / b:.2f}**"


def _not_run(missing: dict[str, str]) -> list[str]:
    """The line naming the queries we cannot run yet (none: no line)."""
    return ["Not run: " + "; ".join(f"{q} needs {why}" for q, why in missing.items()) + "."
            ] if missing else []


def _prefix(data: dict) -> str:
    """``taskset -c N `` when every run was pinned to that one CPU."""
    cpus = {tuple(r.get("cpus") or ()) for r in data["runs"]}
    return f"taskset -c {next(iter(cpus))[0]} " if len(cpus) == 1 and len(next(iter(cpus))) == 1 \
        else ""


def _conditions(runs: list[dict], loads: list[float]) -> list[str]:
    """Where the runs ran: pinned to one CPU or not, and the load average."""
    lines = []
    pinned = [r for r in runs if len(r.get("cpus") or ()) == 1]
    if pinned:
        rest = ("; the other runs ran unpinned on a loaded machine" if len(pinned) < len(runs)
                else "")
        lines += [f"{'All' if len(pinned) == len(runs) else len(pinned)} of the {len(runs)} "
                  "runs were pinned to one CPU "
                  f"(`taskset -c {pinned[0]['cpus'][0]}`: every process of every engine, JVMs "
                  f"included, on one core of 2) while other work ran on the other core{rest}.",
                  ""]
    if loads:
        lines += [f"Load average (1 min, both cores) when the runs started: {min(loads):.1f} "
                  f"to {max(loads):.1f} (median {statistics.median(loads):.1f}).", ""]
    return lines


#: queries whose cells in nexmark.json may have been measured on the per-record path, which
#: branch `nexmark` (issue 39) replaced; its before/after runs (a loaded machine) are in
#: nexmark_issue39.json and NOTES.md. A cell counts as per-record while one of its runs of
#: ours predates run.py's ``query_path`` field (:func:`row_path_cells`).
ROW_PATH_FIGURES = {"q3", "q4", "q6", "q9", "q18", "q20"}


def row_path_cells(runs: list[dict]) -> set[tuple]:
    """(backend, interval, query) of ours' local cells of :data:`ROW_PATH_FIGURES` with a run
    measured before run.py recorded which path ran (``query_path``): the per-record path."""
    return {(r.get("backend"), r.get("interval_s"), r["query"]) for r in runs
            if r["engine"] == "ours" and r["query"] in ROW_PATH_FIGURES
            and (r.get("runner") or "local") == "local" and r.get("kind") != "recovery"
            and not r.get("fail_at") and "query_path" not in r}


def _interval_table(iv, queries, rate, rates, cps, fair=None, ours_cpu=None,
                    row_path=frozenset(), cpu_rate=None) -> list[str]:
    """The rates per query and engine at one checkpoint interval."""
    from bench.nexmark.queries import PER_RECORD
    from bench.nexmark.references import REFERENCE_DBSP, REFERENCE_FLINK_113
    from bench.nexmark.ss import SS_QUERIES

    lines: list[str] = []
    lines += [f"Checkpoints every {iv:g} s (SS: every micro-batch):", "",
              "| query | ours heap | ours RocksDB | Flink hashmap | Flink RocksDB | SS | "
              "ours/Flink (heap) | ours/Flink (RocksDB) | ours heap/SS | Flink 1.13 ref | "
              "ours RocksDB/ref | DBSP / core | ours heap/DBSP | fair Flink hashmap: query "
              "/ source alone (generated source, events/s) | ours / fair Flink (events per "
              "CPU-s) | Flink, generated source | ours heap / Flink, generated source | "
              "per CPU-second: ours heap / Flink, generated source | "
              "ours: checkpoint p50 / max (ms) | ours runs |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for q in [q for q in queries if any(k[3] == iv and k[4] == q for k in rates)]:
        oh, orr = rate("ours", "heap", iv, q), rate("ours", "rocksdb", iv, q)
        fh, fr = rate("flink", "heap", iv, q), rate("flink", "rocksdb", iv, q)
        ss = rate("ss", None, None, q) if q in SS_QUERIES else None
        ref = REFERENCE_FLINK_113.get(q)
        d = sorted(cps.get(("ours", "local", "heap", iv, q), []))
        cp = f"{d[len(d) // 2]} / {d[-1]}" if d else "-"
        how = "per record: " + PER_RECORD[q] if q in PER_RECORD else "vectorized"
        old = [b for b in ("heap", "rocksdb") if (b, iv, q) in row_path]
        if old:
            now = "vectorized" if how == "vectorized" else f"vectorized, then {how}"
            which = "" if len(old) == 2 else f" ({old[0]} only)"
            how = (f"figures of the per-record path{which} (before branch `nexmark`); now "
                   f"{now}; see *Vectorized per-record queries*")
        lines.append(f"| {q} | {_fmt(oh)} | {_fmt(orr)} | {_fmt(fh)} | {_fmt(fr)} | "
                     f"{_fmt(ss) if q in SS_QUERIES else 'n/a'} | {_ratio(oh, fh)} | "
                     f"{_ratio(orr, fr)} | {_ratio(oh, ss)} | {_fmt(ref)} | "
                     f"{_ratio(orr, ref)} | {_fmt(REFERENCE_DBSP.get(q))} | "
                     f"{_ratio(oh, REFERENCE_DBSP.get(q))} | {_fair_cell(fair, iv, q)} | "
                     f"{_ratio(ours_cpu(q) if ours_cpu else None, _fair_rate(fair, iv, q, 'events_per_cpu_s'))} | "
                     f"{_fmt(_fair_rate(fair, iv, q))} | {_ratio(oh, _fair_rate(fair, iv, q))} | "
                     f"{_ratio(cpu_rate('ours', 'heap', iv, q) if cpu_rate else None, _fair_rate(fair, iv, q, 'events_per_cpu_s'))} | "
                     f"{cp} | {how} |")
    lines.append("")
    return lines


def fair_runs(runs: list[dict]) -> dict[tuple, list[dict]]:
    """Flink on a generated source (engine ``flink-gen``, flink_gen.py), by (backend,
    interval, query): the runs that have a rate."""
    out: dict[tuple, list[dict]] = {}
    for r in runs:
        if r.get("engine") == "flink-gen" and r.get("rate"):
            out.setdefault((r.get("backend"), r.get("interval_s"), r["query"]), []).append(r)
    return out


def _median_of(runs: list[dict], field: str):
    v = [r[field] for r in runs if r.get(field)]
    return statistics.median(v) if v else None


def _fair_rate(fair, iv, q, field="rate"):
    return _median_of((fair or {}).get(("heap", iv, q), []), field)


def _fair_cell(fair, iv, q) -> str:
    query, source = _fair_rate(fair, iv, q), _fair_rate(fair, iv, q, "source_rate")
    if query is None:
        return "not measured"
    return f"{_fmt(query)} / {_fmt(source)}"


def _spread(values: list[float]) -> str:
    """``n`` runs and their relative spread (max - min) / median."""
    if len(values) < 2:
        return f"{len(values)} run"
    return f"{len(values)} runs, {(max(values) - min(values)) / statistics.median(values):.0%}"


def fair_flink(fair: dict, rate, cpu_rate=None) -> list[str]:
    """The fair-Flink table (issue 39 item 3): per query Flink on the generated source, the
    source alone, per wall second and per CPU-second of Flink's JVM, against ours."""
    if not fair:
        return []
    runs = [r for rs in fair.values() for r in rs]
    loads = [r["loadavg_before"][0] for r in runs if r.get("loadavg_before")]
    cpus = sorted({tuple(r.get("cpus") or ()) for r in runs})
    lines = [
        "### Fair Flink: a generated source (issue 39 item 3)", "",
        "Flink 2.3 on events it generates itself (`bench/nexmark/flink_gen.py`, engine "
        "`flink-gen` of run.py): the same SQL, settings and blackhole sinks as the CSV "
        "column, over a FLIP-27 `NumberSequenceSource` of event ids whose columns are SQL "
        "expressions of the id reproducing the Nexmark generator (bench/nexmark/generator.py): "
        "2% persons / 6% auctions / 92% bids by `id % 50`, person and auction ids as the "
        "generator derives them, hot auctions (1/2), bidders and sellers (3/4), 1,000 active "
        "people and ~100 auctions in flight, prices `round(10^(6u) * 100)`, half the bids on 4 "
        "hot channels, 10,000 cold channels with one URL each (9 in 10 with `channel_id`), "
        "event time from the id (in order, watermark 4 s), `extra` padded to 100 / 200 / 500 "
        "bytes +-20%. What differs: a random draw is a multiplicative hash of the id (SQL has "
        "no shifts or XOR), strings are slices of fixed pools, the padding is sized from "
        "average field lengths, the hot channels' URLs and the `channel_id` values differ: the "
        "same distributions, not the same values (checked once on events 0-499,999 against "
        "generator.py's Parquet, Flink batch SQL vs DuckDB: 10,000 / 30,000 / 460,000 "
        "persons / auctions / bids in both; bids to hot auctions 50.5% / 50.5%; distinct "
        "auctions 29,970 / 29,979 and bidders 9,933 / 9,928 of the bids; mean price 7.24M / "
        "7.23M; hot channels 50.0% / 50.0%, 10,004 channels, URLs with `channel_id` 45.0% / "
        "45.0%; mean `extra` 67.5 / 67.5 (bid), 140.5 / 138.9 (person), 389.5 / 390.2 "
        "(auction) bytes; mean URL 59.7 / 63.3 bytes; distinct sellers 5,103 / 5,310 of "
        "30,000 auctions). Each run measures the query, then in the "
        "same JVM the source alone (`SELECT <the columns the query reads> FROM events` into "
        "blackhole), both after a warm-up job of 100,000 events; rate = events / the job's "
        "net runtime; per CPU-s = events / the JVM's CPU seconds during the job (every "
        "thread, JIT and GC included: less sensitive to the other work on the machine than "
        "the wall-clock rate). Ours and the CSV Flink are the figures of the table above "
        "(heap/hashmap: the quiet run of 2026-11-25, and for ours the cells re-measured "
        "since, which NOTES.md lists), so the ratios compare runs under different load: "
        "the per-CPU-s columns are the fairer comparison.", "",
        f"Pinned: {', '.join('`taskset -c ' + ','.join(map(str, c)) + '`' for c in cpus)}"
        + "".join(f", `nice -n {n}`" for n in sorted({r.get("nice", 19) for r in runs})) + "; "
        + (f"load average (1 min, both cores) when the runs started: {min(loads):.1f} to "
           f"{max(loads):.1f} (median {statistics.median(loads):.1f})"
           + (": a shared, heavily loaded machine, so the wall-clock rates are low and noisy."
              if statistics.median(loads) > 8 else
              ": a shared machine (the other core busy), so the wall-clock rates are noisy.")
           if loads else ""), "",
        "| query | backend, interval | fair Flink (events/s) | runs, spread | source alone "
        "(events/s) | query / source | fair Flink per CPU-s | source alone per CPU-s | "
        "Flink CSV (events/s) | fair / CSV | ours heap (events/s) | ours / fair Flink | "
        "ours / source alone | ours per CPU-s | ours / fair Flink per CPU-s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (backend, iv, q) in sorted(fair, key=lambda k: (int(k[2][1:]), str(k[0]), -k[1])):
        rs = fair[(backend, iv, q)]
        f, src = _median_of(rs, "rate"), _median_of(rs, "source_rate")
        fc, sc = _median_of(rs, "events_per_cpu_s"), _median_of(rs, "source_events_per_cpu_s")
        csv = rate("flink", backend, iv, q)
        ours = rate("ours", backend, iv, q)
        ours_cpu = cpu_rate(q) if cpu_rate else None
        lines.append(
            f"| {q} | {'hashmap' if backend == 'heap' else backend}, {iv:g} s | {_fmt(f)} | "
            f"{_spread([r['rate'] for r in rs])} | {_fmt(src)} | {_ratio(f, src)} | "
            f"{_fmt(fc)} | {_fmt(sc)} | {_fmt(csv)} | {_ratio(f, csv)} | {_fmt(ours)} | "
            f"{_ratio(ours, f)} | {_ratio(ours, src)} | {_fmt(ours_cpu)} | "
            f"{_ratio(ours_cpu, fc)} |")
    return lines + [
        "", "Ours per CPU-s: events per CPU-second of ours (job master and slot) from "
        "*Events per CPU-second* below (`nexmark_cpu.json`: net of the start-up run where "
        "measured, else gross), \"-\" for a query it has not measured. Flink's per CPU-s "
        "counts the measured job only (not the JVM's start, planning or the warm-up job). "
        "The wall-clock ratios (ours / fair Flink, ours / source alone) set our quiet-run "
        "rates against Flink runs under the load above: read the per-CPU-s ratio.", ""]


def _notes() -> list[str]:
    """NOTES.md if present (its prose moved to bench/HISTORY.md), then the events per
    CPU-second before/after (issue 39) if measured."""
    from bench.nexmark import cpu_report

    lines = []
    if os.path.exists(NOTES):
        with open(NOTES) as f:
            lines += [f.read().strip(), ""]
    if os.path.exists(cpu_report.RESULTS):
        with open(cpu_report.RESULTS) as f:
            lines += cpu_report.render(json.load(f))
    return lines


def _ours_per_cpu_s():
    """Ours' events per CPU-second by query (nexmark_cpu.json: net of the start-up where
    measured, else gross), or None when that file is missing."""
    from bench.nexmark import cpu_report

    if not os.path.exists(cpu_report.RESULTS):
        return None
    with open(cpu_report.RESULTS) as f:
        rates = cpu_report.rates(json.load(f))

    def per_cpu(q):
        net, gross = rates.get(q, (None, None))
        return net or gross
    return per_cpu


def _cells(runs: list[dict]) -> tuple[dict, dict, dict, dict]:
    """By cell (engine, runner, backend, interval, query): the rates, the events per
    CPU-second and the checkpoint durations of its runs; and the recovery runs by query."""
    rates: dict[tuple, list[float]] = {}
    per_cpu: dict[tuple, list[float]] = {}
    cps: dict[tuple, list[int]] = {}
    recovery: dict[str, list[dict]] = {}
    for r in runs:
        if r.get("kind") == "recovery" or r.get("fail_at"):
            recovery.setdefault(r["query"], []).append(r)
            continue
        key = (r["engine"], r.get("runner", "local"), r.get("backend", "-"),
               r.get("interval_s"), r["query"])
        if r.get("rate"):
            rates.setdefault(key, []).append(r["rate"])
        if r.get("events_per_cpu_s"):
            per_cpu.setdefault(key, []).append(r["events_per_cpu_s"])
        cps.setdefault(key, []).extend(r.get("checkpoint_ms") or [])
    return rates, per_cpu, cps, recovery


def render(data: dict) -> list[str]:
    from bench.nexmark.queries import MISSING, QUERIES

    args = data["args"]
    loads = [r["loadavg_before"][0] for r in data["runs"] if r.get("loadavg_before")]
    rates, per_cpu, cps, recovery = _cells(data["runs"])

    def rate(engine, backend, interval, q, runner="local"):
        if engine == "ss":
            v = [x for k, x in rates.items() if k[0] == "ss" and k[4] == q]
        else:
            v = rates.get((engine, runner, backend, interval, q))
        return statistics.median([x for xs in v for x in xs] if engine == "ss" else v) if v else None

    def cpu_rate(engine, backend, interval, q, runner="local"):
        """The median events per CPU-second of every process of the cell's runs."""
        v = per_cpu.get((engine, runner, backend, interval, q))
        return statistics.median(v) if v else None

    def spread(engine, backend, interval, q):
        v = rates.get((engine, "local", backend, interval, q)) or []
        if len(v) < 2:
            return 1.0 if v else 0.0
        return max(0.1, (max(v) - min(v)) / statistics.median(v))

    queries = sorted((q for q in QUERIES if any(k[4] == q for k in rates)),
                     key=lambda q: int(q[1:]))
    intervals = sorted({k[3] for k in rates if k[0] != "ss" and k[3] is not None}, reverse=True)
    lines = [HEADING, "",
             "Commands (in this order, each adding to `bench/results/nexmark.json`; one with "
             "`--replace` replaces the earlier runs of the cells it measures): "
             + "; ".join(f"`{_prefix(data)}.venv/bin/python bench/nexmark/run.py {c}`"
                         for c in data.get("commands") or ["(defaults)"])
             + " (`make bench-nexmark` runs the defaults). Events per second at parallelism 1 (one task slot: "
             "\"per core\"), every engine reading the same generated events "
             f"({args['files']} x {args['events_per_file']:,}, event time at "
             f"{args['event_rate']:,.0f} events/s, 92% bids), exactly-once checkpoints. "
             "Ours: Parquet `FileSource` -> query -> `DiscardSink`, local runner; Flink 2.3.0: "
             "PyFlink SQL (nexmark-flink's DDL and queries, blackhole sinks, mini-batch 2 s / "
             "50,000 rows, split distinct aggregation) over the same events as CSV; Structured "
             "Streaming (PySpark, `local[1]`, RocksDB state store, a checkpoint per "
             "micro-batch, fed more files per trigger than it processes in the 1 s trigger). "
             "q10 writes every bid to files partitioned by `dt`/`hm` (ours: a partitioned "
             "`FileSink`, JSON lines; Flink: its `filesystem` connector, CSV; SS: a CSV file "
             "sink with `partitionBy`), under a temporary directory deleted after the run. "
             "How each rate is taken: bench/nexmark/run.py's docstring. Ratios are of "
             "medians; the Flink 1.13 column is the reference run's per-core figure (issue 27); "
             "the DBSP column is DBSP's published per-core figure (Rust, a laptop, cores "
             "counted as workers; source: the DBSP/Feldera Nexmark paper and blog; issue 39). "
             + (" The fair-Flink columns (Flink on a generated source that is not its "
                "bottleneck, issue 39 item 3): Flink on events it computes in SQL from a "
                "sequence, and that source alone; see *Fair Flink* below."
                if fair_runs(data["runs"]) else
                " The fair-Flink column (Flink on a generated source that is not its "
                "bottleneck, issue 39 item 3) was not measured this round: no such Flink runs "
                "exist yet."),
             ""]
    fair = fair_runs(data["runs"])
    ours_cpu = _ours_per_cpu_s()
    lines += _conditions(data["runs"], loads)
    lines += _notes()
    for iv in intervals:
        lines += _interval_table(iv, queries, rate, rates, cps, fair, ours_cpu,
                                 row_path_cells(data["runs"]), cpu_rate)
    lines += fair_flink(fair, rate, ours_cpu)
    if intervals:
        lines += (targets(queries, rate, intervals[0], spread)
                  + spark_runner(queries, rate, intervals[0]))
    if recovery:
        r0 = next(r for rs in recovery.values() for r in rs if not r.get("error"))
        lines += [f"Checkpoints and recovery (ours, local runner, {r0['backend']}): one more run "
                  f"per query, checkpoints every {r0['interval_s']:g} s, one failure injected "
                  f"after {r0['fail_at']:.0%} of the events (an exception in a function after "
                  "the source; the job restarts from its latest checkpoint). *Recovery* is the "
                  "time from the failure to the restored job's first batch read again; "
                  "*restart* is the job master's part of it (new slots launched until every "
                  "task has restored its state and runs). Checkpoint durations are those of "
                  "both attempts of that run; the throughput tables give those at the longer "
                  "interval.", "",
                  "| query | recovery (s) | restart (s) | checkpoints | checkpoint p50 / max "
                  "(ms) |", "|---|---|---|---|---|"]
        for q in sorted(recovery, key=lambda q: int(q[1:])):
            for r in recovery[q]:
                d = sorted(r.get("checkpoint_ms") or [])
                rec = r.get("recovery_s")
                rs = r.get("restart_startup_s")
                if r.get("error"):
                    why = "timed out" if "timed out" in r["error"] else "failed"
                    lines.append(f"| {q} | - ({why}) | - | - | - |")
                    continue
                lines.append(f"| {q} | {'-' if rec is None else f'{rec:.2f}'} | "
                             f"{'-' if rs is None else f'{rs:.2f}'} | {len(d)} | "
                             + (f"{d[len(d) // 2]} / {d[-1]} |" if d else "- |"))
        lines.append("")
    lines += _not_run(MISSING)
    lines += ["SS cannot express q4, q5, q6, q7, q8, q9, q12, q15, q16, q18, q19 on streams "
              "(bench/nexmark/ss.py says why); Flink runs no q6 (nexmark-flink has none: its "
              "SQL would be an OVER window over an updating input).", ""]
    return lines


def spark_runner(queries: list[str], rate, iv) -> list[str]:
    spark = [(q, rate("ours", "heap", iv, q, "spark"), rate("ours", "heap", iv, q))
             for q in queries]
    if not any(v for _, v, _ in spark):
        return []
    lines = [f"Ours on the Spark runner (PySpark `local[1]`, one slot in a Spark barrier "
             f"task, heap, checkpoints every {iv:g} s; the rate excludes the "
             "Spark session's and the slot's start-up, as the local runner's does):", "",
             "| query | ours local | ours Spark runner | Spark runner / local |",
             "|---|---|---|---|"]
    lines += [f"| {q} | {_fmt(loc)} | {_fmt(v)} | {_ratio(v, loc)} |" for q, v, loc in spark if v]
    return lines + [""]


def _verdict(ratios: list, band: float = 1.0) -> str:
    """"met" when every measured backend is at least 1.0x, with a warning when a ratio is
    within the noise: closer to 1.0x than ``band`` (the repetitions' relative spread)."""
    rs = [r for r in ratios if r]
    if not rs:
        return "-"
    met = all(r >= 1 for r in rs)
    word = "**met**" if met else ("**not met**" if not any(r >= 1 for r in rs)
                                  else "**met on " + ("heap" if ratios[0] and ratios[0] >= 1
                                                      else "RocksDB") + " only**")
    return word + (" (within noise)" if any(1 / (1 + band) < r < 1 + band for r in rs) else "")


def targets(queries: list[str], rate, iv, spread=lambda *k: 1.0) -> list[str]:
    """Issue 27's targets per query: ours against the reference Flink 1.13 per core (where the
    reference has the query) and against Flink 2.3 measured here, each backend against
    its counterpart."""
    from bench.nexmark.references import REFERENCE_FLINK_113

    lines = [f"Targets (issue 27), checkpoints every {iv:g} s: ours at least the reference "
             "Flink 1.13 per-core rate, and at least 1.0x Flink 2.3 measured here (heap vs "
             "hashmap, RocksDB vs RocksDB). \"met\" needs both of ours backends at 1.0x or "
             "more; \"(within noise)\" marks a ratio closer to 1.0x than the relative spread "
             "(max - min) / median of the repetitions of either cell (at least 10%; 1.0x, "
             "i.e. 0.5x-2x, for a cell measured once).", "",
             "| query | ours heap | ours RocksDB | Flink 1.13 ref | ours/ref (heap / RocksDB) | "
             "vs ref | Flink 2.3 hashmap / RocksDB | ours/Flink 2.3 (heap / RocksDB) | "
             "vs Flink 2.3 |", "|---|---|---|---|---|---|---|---|---|"]

    def pair(a, b):
        return [x / y if x and y else None for x, y in zip(a, b, strict=True)]

    def show(rs):
        return " / ".join("-" if r is None else f"{r:.2f}" for r in rs)

    for q in queries:
        ours = [rate("ours", "heap", iv, q), rate("ours", "rocksdb", iv, q)]
        flink = [rate("flink", "heap", iv, q), rate("flink", "rocksdb", iv, q)]
        if not any(ours) or not (any(flink) or q in REFERENCE_FLINK_113):
            continue
        ref = REFERENCE_FLINK_113.get(q)
        vs_ref = pair(ours, [ref, ref])
        vs_flink = pair(ours, flink)
        band_ours = max(spread("ours", b, iv, q) for b in ("heap", "rocksdb"))
        band_flink = max(band_ours, *(spread("flink", b, iv, q) for b in ("heap", "rocksdb")))
        lines.append(f"| {q} | {_fmt(ours[0])} | {_fmt(ours[1])} | {_fmt(ref)} | "
                     f"{show(vs_ref) if ref else '-'} | "
                     f"{_verdict(vs_ref, band_ours) if ref else '-'} | "
                     f"{_fmt(flink[0])} / {_fmt(flink[1])} | {show(vs_flink)} | "
                     f"{_verdict(vs_flink, band_flink)} |")
    return lines + [""]


if __name__ == "__main__":  # the whole page: run bench/write_benchmarks.py (the page's writer
    # imports this module's render(): run it as a script, not an import, so no circle)
    import runpy

    sys.path.insert(0, ROOT)
    runpy.run_path(os.path.join(ROOT, "bench", "write_benchmarks.py"), run_name="__main__")
