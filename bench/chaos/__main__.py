"""The chaos matrix's command line.

    python -m bench.chaos --cell q4/local/heap/aligned --seed 123        # replay one run
    python -m bench.chaos --runs 3                                        # every cell, 3 runs
    python -m bench.chaos --cells 'q*/local/*' --runs 2                   # cells by glob
    python -m bench.chaos --sample 6 --seed 20261126                      # a sampled slice
    python -m bench.chaos --list                                          # the cells
    python -m bench.chaos --report-only                                   # CHAOS.md again
    python -m bench.chaos --fill --until 00:20 --cells '*/local/*'        # least-run cells

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
        if not r.get("environment") and r.get("settings") == SETTINGS:
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
    args = ap.parse_args(argv)
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
                done.append(_run_and_record(cell, args.seed + i, args))
            if args.report:
                write_report(args.results, args.report)
    print(summary(done), flush=True)
    return 1 if any(not r["ok"] for r in done) else 0


if __name__ == "__main__":
    sys.exit(main())
