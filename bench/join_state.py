"""Join state over N minutes: the interval join and the window join of bench/joins.py fed
at a steady rate for ``--minutes`` (default 10) each, with the state of the join operator
sampled at every checkpoint: the bytes of its keyed state in the checkpoint (all subtasks),
as the metadata DB records them per operator (table ``operator_state_sizes``, the query of
docs/how-to/state-as-tables.md). The watermark clean-up must keep them flat.

    PYTHONPATH=$PWD .venv/bin/python bench/join_state.py [--minutes 10] [--rate 2000]

The data is bench/joins.py's (string keys, bounded disorder, watermark bound on both sides),
with event time advancing at the wall-clock pace (``--rate`` rows per second per side, one
row every ``1000 / rate`` ms of event time), so the state holds the last few hundred ms
(interval join) or the open window (window join) of each key. Every checkpoint is retained
and its size read after the run. (Results before issue 53 also count the rows the join
holds, read from the checkpoints with engine internals: the public state reader,
``read_state_table``, cannot read the join buffers, whose values mix rows and flags; the
section shows those columns when the results have them.) Writes join_state.json; :func:`join_state_section` renders it for
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from jobs import add_results_dir, run_to_end, write_results  # noqa: E402
from joins import build  # noqa: E402
from regular_join_report import regular_join_section  # noqa: E402, F401 (write_benchmarks.py)

#: the join operator's uid in bench/joins.py's pipelines
JOIN_UID = "join"


def join_state_bytes(metadata_url: str, job_id: str) -> dict[int, int]:
    """Checkpoint id -> bytes of the join operator's keyed state (all subtasks), from the
    metadata DB's ``operator_state_sizes`` table (docs/how-to/state-as-tables.md)."""
    import sqlalchemy as sa

    engine = sa.create_engine(metadata_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(
                "SELECT checkpoint_id, state_bytes FROM operator_state_sizes "
                "WHERE job_id = :job AND operator_uid = :uid"), {"job": job_id, "uid": JOIN_UID})
            return {int(c): int(b) for c, b in rows}
    finally:
        engine.dispose()


def run(kind: str, args) -> dict:
    root = tempfile.mkdtemp(prefix=f"bench-join-state-{kind}-")
    try:
        records = int(args.rate * args.minutes * 60)
        p = build(kind, root, args, records, rate=args.rate,
                  interval_ms=args.checkpoint_ms, retained=100_000, history=100_000)
        result, elapsed, done = run_to_end(p, kind)
        start = done[0].trigger_time if done else None
        sizes = join_state_bytes(p.metadata_url, result.job_id)
        samples = []
        for c in done:
            samples.append({"checkpoint_id": c.checkpoint_id,
                            "seconds": round((c.trigger_time - start).total_seconds(), 1),
                            # no row: an empty join state has no files (0 bytes)
                            "join_state_bytes": sizes.get(c.checkpoint_id, 0),
                            "job_state_bytes": c.state_size})
        print(f"{kind}: {len(samples)} checkpoints in {elapsed:.0f} s; join state bytes "
              f"{[s['join_state_bytes'] for s in samples[::max(1, len(samples) // 8)]]}",
              flush=True)
        return {"records_per_side": records, "seconds": elapsed, "samples": samples}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _summary(samples: list[dict], field: str) -> dict:
    """First, middle, last (the last before end of input: the final checkpoint, after the
    end-of-input watermark, holds nothing) and max of one series."""
    live = samples[:-1] if len(samples) > 1 else samples
    values = [s[field] for s in live]
    return {"start": values[0], "middle": values[len(values) // 2], "end": values[-1],
            "max": max(values), "final": samples[-1][field]}


def join_state_section(data: dict | None, lines: list[str]) -> None:
    """The "Join state over N minutes" table of BENCHMARKS.md from join_state.json."""
    if not data:
        return
    a = data["args"]
    with_rows = all("rows" in r for r in data["runs"].values())  # results before issue 53
    lines += [f"### Join state over {a['minutes']:g} minutes", "",
              f"Command: `PYTHONPATH=$PWD .venv/bin/python bench/join_state.py --minutes "
              f"{a['minutes']:g} --rate {a['rate']:g} --checkpoint-ms {a['checkpoint_ms']}`. "
              f"Each join of the table above fed at {a['rate']:,.0f} rows/s per side "
              f"({a['keys']:,} keys, event time at the wall-clock pace, disorder up to "
              f"{a['disorder_ms']} ms, watermark bound {a['bound_ms']} ms), "
              f"{a['state_backend']} state, a checkpoint every {a['checkpoint_ms'] / 1000:g} s, "
              "all retained: the bytes of the join operator's keyed state (both subtasks"
              + ("), read back after the run, and the rows it holds (both sides), at the first, "
                 if with_rows else ", from the metadata DB's operator_state_sizes), at the first, ")
              + "the middle and the last checkpoint before the end of input, and the largest. "
              f"1-minute load average {data['load_average'][0]} before, "
              f"{data['load_average'][1]} after (2 cores)."
              + (f" Conditions: {data['note']}" if data.get("note") else ""), "",
              "| join | checkpoints | bytes: start | middle | end | max | "
              + ("rows: start | middle | end | max | after end of input |" if with_rows
                 else "after end of input |"),
              "|---|---|---|---|---|---|" + ("---|---|---|---|---|" if with_rows else "---|")]
    for kind, r in data["runs"].items():
        b = r["bytes"]
        line = (f"| {kind} join | {len(r['samples'])} | {b['start']:,} | {b['middle']:,} | "
                f"{b['end']:,} | {b['max']:,} | ")
        if with_rows:
            n = r["rows"]
            line += (f"{n['start']:,} | {n['middle']:,} | {n['end']:,} | {n['max']:,} | "
                     f"{n['final']:,} rows |")
        else:
            line += f"{b['final']:,} bytes |"
        lines.append(line)
    lines.append("")


def join_layout_section(data: dict | None, lines: list[str]) -> None:
    """The "Join state layout" table of BENCHMARKS.md from join_layout.json (written by hand
    from the runs its ``how`` names)."""
    if not data:
        return
    lines += ["### Join state layout: one map per key and side vs one entry per row", "",
              data["how"], "", "| measurement | join | backend | keys | before (rows/s) | "
              "after (rows/s) | after / before | load average |", "|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        lines.append(f"| {r['what']} | {r['join']} | {r['backend']} | {r['keys']:,} | "
                     f"{r['before']:,} | {r['after']:,} | {r['after'] / r['before']:.2f} | "
                     f"{r['load']} |")
    lines += ["", data["conclusion"], ""]


def broadcast_temporal_section(data: dict | None, lines: list[str]) -> None:
    """The broadcast connect and temporal join table from broadcast_temporal.json."""
    if not data:
        return
    s = data["summary"]
    names = {"broadcast": "broadcast connect (rules + events)",
             "temporal": f"temporal join, versioned table in event time (a version per "
                         f"{s['versions_every']} events)",
             "static": "temporal join, table without time (stream-static)"}
    lines += [f"### Broadcast connect and temporal joins at saturation ({s['keys']:,} keys, "
              f"{s['reps']} rep(s))", "",
              f"Command: `PYTHONPATH=$PWD .venv/bin/python bench/broadcast_temporal.py "
              f"--records {s['records']} --reps {s['reps']}`. Ours: the per-record operators, "
              f"{s['records']:,} events (string keys, disorder up to {s['disorder_ms']} ms, "
              f"watermark bound {s['bound_ms']} ms), parallelism 2, heap state, 1 s "
              "checkpoints, discarding sink, local runner; rows of both inputs / (wall time - "
              "start-up). SS (stream-static only: SS has neither broadcast state nor an "
              "event-time temporal join): the rate stream's keys left-joined with a static "
              "DataFrame of one price per key, local[2], noop sink; rows / summed "
              "triggerExecution after the warm-up batches. 1-minute load average "
              f"{s['load_average'][0]} before, {s['load_average'][1]} after (2 cores)."
              + (f" Conditions: {s['note']}" if s.get("note") else ""), "",
              "| operator | ours (rows/s) | SS (rows/s) | ours / SS |", "|---|---|---|---|"]
    for kind, sc in s["scenarios"].items():
        ss, ratio = sc.get("ss_records_per_s"), sc.get("ratio_local")
        lines.append(f"| {names.get(kind, kind)} | {sc['local_records_per_s']:,.0f} | "
                     + (f"{ss:,.0f} | **{ratio:.2f}** |" if ss else "- | - |"))
    lines.append("")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0, help="per join")
    ap.add_argument("--rate", type=float, default=2_000, help="rows/s per side")
    ap.add_argument("--checkpoint-ms", type=int, default=5_000)
    ap.add_argument("--kinds", default="interval,window")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--disorder-ms", type=int, default=100)
    ap.add_argument("--bound-ms", type=int, default=200)
    ap.add_argument("--lower-ms", type=int, default=-100)
    ap.add_argument("--upper-ms", type=int, default=100)
    ap.add_argument("--window-ms", type=int, default=1000)
    ap.add_argument("--state-backend", default="heap", choices=("heap", "rocksdb"))
    ap.add_argument("--note", default="")
    add_results_dir(ap)
    args = ap.parse_args(argv)
    args.step_ms = 1000 / args.rate  # event time at the wall-clock pace
    load_before = os.getloadavg()
    runs = {}
    for kind in [k for k in args.kinds.split(",") if k]:
        r = run(kind, args)
        r["bytes"] = _summary(r["samples"], "join_state_bytes")
        runs[kind] = r
    data = {"args": {k: v for k, v in vars(args).items() if k != "results_dir"},
            "runs": runs, "note": args.note,
            "load_average": [round(load_before[0], 1), round(os.getloadavg()[0], 1)]}
    write_results(args.results_dir, "join_state.json", data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
