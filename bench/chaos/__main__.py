"""The chaos matrix's command line.

    python -m bench.chaos --cell q4/local/heap/aligned --seed 123        # replay one run
    python -m bench.chaos --runs 3                                        # every cell, 3 runs
    python -m bench.chaos --cells 'q*/local/*' --runs 2                   # cells by glob
    python -m bench.chaos --sample 6 --seed 20261126                      # a sampled slice
    python -m bench.chaos --list                                          # the cells
    python -m bench.chaos --report-only                                   # CHAOS.md again
    python -m bench.chaos --fill --until 00:20 --cells '*/local/*'        # least-run cells
    python -m bench.chaos --cell kafka-changelog/local/rocksdb/aligned --seed 1007 \
        --runs 20 --same-seed --kafka-changelog-sinks 2 --keep-broker --slot-log-level INFO

Each run appends its record to ``--results`` (JSON lines); the table of every recorded run
is written to ``--report`` (CHAOS.md). A failing run prints its seed and replay command.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import random
import sys
import tempfile
import time

from .catalogue import CATALOGUE, ROOT
from .run import SETTINGS, UNFINISHED, Cell, run_one

RESULTS = os.path.join(ROOT, "bench", "results", "chaos.jsonl")
REPORT = os.path.join(ROOT, "CHAOS.md")


def all_cells() -> list[Cell]:
    """Every pipeline x runner x backend x mode under kills of any kind, and the
    driver-kill cells: the multi-query pipelines on the Spark runner with every kill a
    driver SIGKILL (then ``restore="latest"``)."""
    every = [
        Cell(e.name, runner, backend, mode)
        for e in CATALOGUE.values()
        for runner in e.runners
        for backend in ("heap", "rocksdb")
        for mode in ("aligned", "unaligned")
    ]
    return every + [
        Cell(e.name, "spark", backend, mode, kills="driver")
        for e in CATALOGUE.values()
        if e.group == "nexmark-multi"
        for backend in ("heap", "rocksdb")
        for mode in ("aligned", "unaligned")
    ]


def select(patterns: list[str] | None, cells: list[str] | None) -> list[Cell]:
    if cells:
        return [Cell.parse(c) for c in cells]
    every = all_cells()
    if not patterns:
        return every
    return [c for c in every if any(fnmatch.fnmatch(c.id, p) for p in patterns)]


def sample(cells: list[Cell], k: int, seed: int) -> list[Cell]:
    """``k`` cells drawn by ``seed``, at most one per pipeline while pipelines remain."""
    rng = random.Random(seed)
    by_pipeline: dict[str, list[Cell]] = {}
    for c in cells:
        by_pipeline.setdefault(c.pipeline, []).append(c)
    names = sorted(by_pipeline)
    rng.shuffle(names)
    return [rng.choice(by_pipeline[n]) for n in names[:k]]


def next_run(cells: list[Cell], records: list[dict], seed: int) -> tuple[Cell, int]:
    """The cell with the fewest recorded runs on the current settings (run.SETTINGS; not
    counting runs the environment broke; ties in an order drawn by ``seed`` and the count),
    and a seed above every seed recorded for it and above 1000 (the seeds of the first
    sessions: a new run never repeats one)."""
    runs: dict[str, int] = {}
    seeds: dict[str, int] = {}
    for r in records:
        # a run the environment broke is not a run of the cell, nor one on other settings
        if not r.get("environment") and r.get("settings") == SETTINGS and not r.get("diagnostic"):
            runs[r["cell"]] = runs.get(r["cell"], 0) + 1
        seeds[r["cell"]] = max(seeds.get(r["cell"], 0), int(r["seed"]))
    rng = random.Random(seed * 1_000_003 + len(records))
    order = sorted(cells, key=lambda c: (runs.get(c.id, 0), rng.random()))
    cell = order[0]
    return cell, max(seeds.get(cell.id, 0), 1000) + 1


def _run_and_record(cell: Cell, seed: int, args) -> dict:
    record = run_one(cell, seed, args.workdir, keep=args.keep, max_faults=args.max_faults)
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    with open(args.results, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")
    fired = [f"{f['kind']}@{f['landed']}" for f in record["faults"] if f["fired_at"]]
    print(
        f"{'ok  ' if record['ok'] else 'FAIL'} {cell.id} seed {seed}: "
        f"{record['status']}, restarts {record['restarts']}, faults {fired}, "
        f"{record['seconds']} s, {record.get('cpu_seconds')} CPU s",
        flush=True,
    )
    if not record["ok"]:
        print(f"     {record['failure_reason'] or ''}"[:600], flush=True)
        for path, d in record["differences"].items():
            print(
                f"     {path}: {d['missing']} missing, {d['extra']} extra "
                f"(of {d['expected']}); e.g. {d['missing_examples'][:1]} "
                f"{d['extra_examples'][:1]}"[:600],
                flush=True,
            )
        state = record.get("broker_state")
        if state:
            print(f"     broker: {state.get('verdict') or state.get('error')}"[:600], flush=True)
            for topic, t in (state.get("topics") or {}).items():
                print(
                    f"     {topic}: read_committed {t['read_committed_vs_reference']}, "
                    f"read_uncommitted {t['read_uncommitted_vs_reference']}; per partition "
                    f"committed/uncommitted records "
                    + ", ".join(
                        f"{p}: {t['read_committed'][p]['records']}/"
                        f"{t['read_uncommitted'][p]['records']}"
                        for p in t["read_committed"]
                    )
                    + f"; probe visible after (s) {t.get('probe_visible_after_s')}",
                    flush=True,
                )
            print(
                f"     markers (uid/subtask/job: last published epoch): {state.get('markers')}"[
                    :600
                ],
                flush=True,
            )
        print(f"     replay: {record['replay']}", flush=True)
    return record


def summary(records: list[dict]) -> str:
    """One line for the runs of this invocation: killed runs, differences, unfinished."""
    killed = [
        r for r in records if any(f["fired_at"] and f["kind"] != "raise" for f in r["faults"])
    ]
    unfinished = [r for r in records if r["status"] == UNFINISHED]
    return (
        f"{len(records)} runs, {len(killed)} killed runs, "
        f"{sum(1 for r in records if r['differences'])} with committed rows that differ "
        f"from the reference, {len(unfinished)} unfinished (no end within the cell's bound), "
        f"{sum(1 for r in records if not r['ok'])} failed; wall "
        f"{sum(r['seconds'] for r in records):.0f} s"
    )


def _deadline(until: str | None) -> float | None:
    """``HH:MM`` (UTC, today or, if passed, tomorrow) as a wall-clock time."""
    if not until:
        return None
    hh, mm = (int(x) for x in until.split(":"))
    now = time.time()
    day = now - now % 86400
    t = day + hh * 3600 + mm * 60
    return t if t > now else t + 86400


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos")
    ap.add_argument("--cell", action="append", help="pipeline/runner/backend/mode (repeatable)")
    ap.add_argument("--cells", action="append", help="glob over cell ids (repeatable)")
    ap.add_argument("--seed", type=int, default=1, help="the first run's seed (then +1 ...)")
    ap.add_argument("--runs", type=int, default=1, help="runs per cell")
    ap.add_argument(
        "--same-seed",
        action="store_true",
        help="every run of --runs with --seed (replay one plan again and again), not "
        "--seed, --seed + 1, ...",
    )
    ap.add_argument("--sample", type=int, default=0, help="only this many cells, drawn by --seed")
    ap.add_argument("--max-faults", type=int, default=3)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "chaos"))
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--report", default=REPORT)
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument(
        "--fill",
        action="store_true",
        help="run the selected cell with the fewest recorded runs, with a new seed, again "
        "and again (until --until or --runs runs)",
    )
    ap.add_argument("--until", help="--fill: start no run after HH:MM (UTC)")
    ap.add_argument(
        "--keep-broker",
        action="store_true",
        help="Kafka cells: after a run that differed, leave the test broker running (its "
        "address and PID are printed) for a look by hand",
    )
    ap.add_argument(
        "--broker-threads",
        type=int,
        help="Kafka cells: the test broker's tokio worker threads (a reproduction: recorded "
        "as diagnostic, not counted in the cell)",
    )
    ap.add_argument(
        "--kafka-sum-shape",
        choices=("fixed-3", "key-1"),
        default="fixed-3",
        help="kafka-sum's sink: partitioner='fixed' into 3 partitions (the cell) or the "
        "shape before 374720b, partitioner='key' into 1 (a reproduction, recorded as "
        "diagnostic)",
    )
    ap.add_argument(
        "--kafka-changelog-sinks",
        type=int,
        default=1,
        help="kafka-changelog's upsert sinks' parallelism: 1 (the cell) or 2 (the Kafka "
        "tests' shape, both subtasks on every partition: a reproduction, recorded as "
        "diagnostic)",
    )
    ap.add_argument(
        "--slot-log-level",
        help="CKPT_LOG_LEVEL of the slots (INFO: the Kafka sink's publish lines in the "
        "driver logs; a reproduction: recorded as diagnostic, not counted in the cell)",
    )
    args = ap.parse_args(argv)
    from . import kafka_cells, run

    run.SLOT_LOG_LEVEL = args.slot_log_level
    kafka_cells.KEEP_BROKER = args.keep_broker
    kafka_cells.BROKER_THREADS = args.broker_threads
    shape, partitions = args.kafka_sum_shape.split("-")
    kafka_cells.SUM_SHAPE = (shape, int(partitions))
    kafka_cells.CHANGELOG_SINKS = args.kafka_changelog_sinks
    cells = select(args.cells, args.cell)
    if args.sample:
        cells = sample(cells, args.sample, args.seed)
    if args.list:
        print("\n".join(c.id for c in cells))
        return 0
    from .report import load, write_report

    if args.report_only:
        write_report(args.results, args.report)
        return 0
    done: list[dict] = []
    if args.fill:
        deadline = _deadline(args.until)
        n = 0
        while (deadline is None and n < args.runs) or (deadline and time.time() < deadline):
            cell, seed = next_run(cells, load(args.results), args.seed)
            done.append(_run_and_record(cell, seed, args))
            n += 1
        if args.report:
            write_report(args.results, args.report)
    else:
        for i in range(args.runs):
            for cell in cells:
                done.append(_run_and_record(cell, args.seed + (0 if args.same_seed else i), args))
            if args.report:
                write_report(args.results, args.report)
    print(summary(done), flush=True)
    return 1 if any(not r["ok"] for r in done) else 0


if __name__ == "__main__":
    sys.exit(main())
