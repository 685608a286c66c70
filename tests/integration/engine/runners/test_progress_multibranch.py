"""Progress of every branch of a job whose queries share one source (issue 51, item 1).

The bench's Nexmark q7 (a per-batch combiner, then a 10 s window that emits only when it
fires: a bursty branch) and q19 (a keyed top-n over every bid: a steady branch that takes
the source's throughput) on one shared Parquet ``FileSource`` at parallelism 2, 200 ms
checkpoints, every other setting at its default (buffer debloating on). Reported: each
query alone finished in 17 s and 48 s; together, q7 emitted its first row after ~7 minutes
and the job had not finished after 9 (28-35 s with debloating off).

The test asserts progress, not time: every 200 ms checkpoint is a consistent cut of the
records each operator took in and emitted and of each task's watermark; while the source
is still reading, each branch's operator takes in records, and the window's watermark
advances, at least every ``STALL_S`` seconds, and the window emits its first windows before
the source ends. A starved branch fails it whatever the machine's load; the time against
the run without debloating is measured in bench/ (see the closing note of issue 51).
"""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    FileSource,
    Pipeline,
    RestartStrategy,
    WatermarkStrategy,
    read_committed,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore

#: events of the run and their event-time rate: 150 s of event time, fifteen 10 s windows;
#: a file per source subtask (split j runs on subtask j % 2): the first file's windows fire
#: one by one while the source reads (the watermark is the lower of the two subtasks')
EVENTS, EVENT_RATE, EVENTS_PER_FILE = 1_500_000, 10_000, 750_000
#: at most this long without a branch taking in records (or the window's watermark moving)
#: while the source reads: generous for a loaded machine, far below the reported stall
STALL_S = 30.0
QUERIES = ("q7", "q19")
#: the operator of each branch whose input shows the branch moving
BRANCH_OPERATOR = {"q7": "q7-max", "q19": "q19-top10"}


@pytest.fixture(scope="module")
def nexmark_events(tmp_path_factory) -> str:
    from bench.nexmark.generator import NexmarkConfig, write_parquet

    d = str(tmp_path_factory.mktemp("nexmark") / "parquet")
    write_parquet(d, EVENTS, config=NexmarkConfig(events_per_second=EVENT_RATE),
                  events_per_file=EVENTS_PER_FILE)
    return d


def build(root: str, data: str, queries: tuple[str, ...] = QUERIES,
          **checkpoint_options) -> Pipeline:
    """``queries`` (bench/nexmark's builders; q7 and q19) on one Parquet source, a FileSink
    each (bench/debloat_multi_branch.py runs it too)."""
    from bench.nexmark import queries as nexmark

    p = Pipeline(
        "-".join(queries), batch_size=8192,
        checkpoint=CheckpointConfig(interval_ms=200, directory=os.path.join(root, "ckpt"),
                                    **checkpoint_options),
        metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
        restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0))
    columns = sorted({c for q in queries for c in nexmark.COLUMNS[q]})
    events = p.source(
        FileSource(data, format="parquet", parquet_batch_size=65_536, columns=columns),
        uid="events", parallelism=2,
        watermarks=WatermarkStrategy.for_bounded_out_of_orderness(
            4000, timestamp_field="date_time"))
    for q in queries:
        nexmark.QUERIES[q](events, 2).sink(FileSink(os.path.join(root, "out", q)),
                                           uid=f"out-{q}")
    return p


def progress(store: MetadataStore, job_id: str) -> list[dict]:
    """Per completed checkpoint, in order: its completion time, the source's records out,
    per branch its operator's records in and its sink's, and the window's watermark (the
    lowest of its subtasks; ``None`` until every subtask has one)."""
    rows = []
    for c in sorted(store.list_checkpoints(job_id), key=lambda c: c.checkpoint_id):
        if c.complete_time is None or not c.task_stats:
            continue
        row: dict = {"t": c.complete_time.timestamp(), "source": 0,
                     **{q: [0, 0] for q in QUERIES}}
        window_marks = []
        for t in c.task_stats:
            records = t.get("records") or {}
            row["source"] += (records.get("events") or [0, 0])[1]
            for q, uid in BRANCH_OPERATOR.items():
                if uid in records:
                    row[q][0] += records[uid][0]
                # what the branch emitted: its sink's input (a window's fired output counts
                # as the input of the operator after it, not as the window's output)
                row[q][1] += (records.get(f"out-{q}") or [0, 0])[0]
            if BRANCH_OPERATOR["q7"] in records:
                window_marks.append(t.get("watermark"))
        row["watermark"] = (None if not window_marks or None in window_marks
                            else min(window_marks))
        rows.append(row)
    return rows


def longest_standstill(rows: list[dict], value) -> float:
    """The longest time, while the source was still reading, in which ``value(row)`` did
    not change (from the first completed checkpoint: the slots' start-up on a loaded
    machine is no stall; a stretch without completed checkpoints counts)."""
    worst, since, last = 0.0, rows[0]["t"], value(rows[0])
    for row in rows:
        v = value(row)
        if v != last:
            worst = max(worst, row["t"] - since)
            since, last = row["t"], v
        if row["source"] >= EVENTS:
            return worst
    return max(worst, rows[-1]["t"] - since)


@pytest.mark.timeout(600)
def test_q7_and_q19_on_one_source_both_progress_under_default_settings(tmp_path, nexmark_events):
    p = build(str(tmp_path), nexmark_events)
    assert p.checkpoint.buffer_debloat_target_ms == CheckpointConfig().buffer_debloat_target_ms
    result = p.run()
    assert result.status == "FINISHED", result.failure_reason
    store = MetadataStore(p.metadata_url)
    try:
        job = store.get_job(result.job_id)
        rows = progress(store, result.job_id)
    finally:
        store.close()
    started = job.created_at.timestamp()
    assert rows and rows[-1]["source"] == EVENTS, rows[-1:]
    stalls = {q: longest_standstill(rows, lambda r, q=q: r[q][0]) for q in QUERIES}
    stalls["q7 watermark"] = longest_standstill(rows, lambda r: r["watermark"])
    read_s = next(r["t"] for r in rows if r["source"] >= EVENTS) - started
    print(f"\nsource read for {read_s:.1f} s; longest standstills {stalls}")
    assert all(s <= STALL_S for s in stalls.values()), stalls
    # the bursty branch fired its first windows while the source was still reading
    reading = [r for r in rows if r["source"] < EVENTS]
    assert any(r["q7"][1] > 0 for r in reading), "q7 emitted nothing before the source ended"
    # and every window, once (a row per top bid)
    windows = {r["window_end"] for r in read_committed(str(tmp_path / "out" / "q7"))}
    assert len(windows) == EVENTS // EVENT_RATE // 10
    assert sum(1 for _ in read_committed(str(tmp_path / "out" / "q19"))) > 0
    assert sum(pq.ParquetFile(os.path.join(nexmark_events, f)).metadata.num_rows
               for f in os.listdir(nexmark_events)) == EVENTS
