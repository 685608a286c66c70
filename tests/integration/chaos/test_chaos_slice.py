"""A sampled slice of the chaos matrix (bench/chaos; ``make chaos`` runs every cell): two
cells, rotating by date, each run once under the seeded faults of the day (SIGKILLs of a
slot or the driver, raised exceptions) and compared with its reference (Nexmark: DuckDB
SQL written from the query texts). Starts real jobs, the two cells side by side: 40-150 s
depending on the machine's load.

``CHAOS_SLICE_SEED=<n>`` fixes the sample and the seeds (e.g. to replay a CI failure); a
failing cell's message has its one-line replay command.
"""

from __future__ import annotations

import datetime
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.chaos.catalogue import CATALOGUE
from bench.chaos.run import Cell, run_one

pytest.importorskip("duckdb")
pytestmark = pytest.mark.slow

SEED = int(os.environ.get("CHAOS_SLICE_SEED") or datetime.date.today().toordinal())
#: the slice's candidates: local runner, DuckDB-referenced (no failure-free run to pay for)
#: cells that fail today (CHAOS.md, "Findings") are not sampled: a failing run spends its
#: restarts for minutes; the xfail test below names them with their replay command
#: none today: the join queries' unaligned cells (a chain without a uid: its in-flight
#: records are now kept under a derived id), q12/rocksdb/unaligned (in-flight records
#: replayed at the checkpoint's processing time) and join-broadcast-temporal/unaligned
#: (each subtask restores its own broadcast copy) pass since the recovery branch
KNOWN_FAILING: dict[str, str] = {}
CANDIDATES = sorted(
    cell
    for e in CATALOGUE.values()
    if e.group == "nexmark"  # one query per job (the multi-query cells run in make chaos)
    for backend in ("heap", "rocksdb")
    for mode in ("aligned", "unaligned")
    if (cell := f"{e.name}/local/{backend}/{mode}") not in KNOWN_FAILING
)
CELLS = [CANDIDATES[(SEED * 7 + i * 53) % len(CANDIDATES)] for i in range(2)]


@pytest.mark.timeout(175)
def test_chaos_slice_commits_the_reference_rows(tmp_path):
    """The slice's cells run side by side (each a job of 3 processes), so the slice takes
    about as long as its slowest cell."""
    with ThreadPoolExecutor(len(CELLS)) as pool:
        records = list(
            pool.map(
                lambda c: run_one(
                    Cell.parse(c), SEED, str(tmp_path / c.replace("/", "-")), max_faults=2
                ),
                CELLS,
            )
        )
    failures = []
    for cell, record in zip(CELLS, records, strict=True):
        fired = [f for f in record["faults"] if f["fired_at"] is not None]
        assert all(f["landed"] for f in fired), record["faults"]
        if not record["ok"]:
            failures.append(
                f"{cell} seed {SEED}: {record['status']} {record['failure_reason'] or ''} "
                f"differences {record['differences']}; replay: {record['replay']}"
            )
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "pipeline",
    [
        pytest.param(cell, marks=pytest.mark.xfail(run=False, reason=why))
        for cell, why in KNOWN_FAILING.items()
    ],
)
def test_known_failing_pipelines(pipeline):
    """Not run (each takes minutes to spend its restarts): replay one with
    ``python -m bench.chaos --cell <cell> --seed 2``."""
    raise AssertionError(pipeline)
