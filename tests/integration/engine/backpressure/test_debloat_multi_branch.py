"""Buffer debloating in a job with two branches on one source (issue 51).

A shared Parquet source feeds a steady branch (every row to a keyed top-n) and a bursty one
(a per-batch combiner that cuts a batch to a row per window, then a per-record window that
emits only when it fires; a function chained behind it takes half a second to open, as one
that loads something does). Debloating must not starve either: the window's credit must not
collapse to the floor on the few records per second it measures, and the job under the
default settings takes at most about as long as without debloating.

Both runs are in this test, side by side, so a loaded machine slows both. The main measure
is the credit of the bursty branch's window (a count, from the checkpoints' task stats),
then the time against the run without debloating.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from multi_branch_pipelines import (
    SlowStart,
    higher,
    steady,
    window_max_per_batch,
)

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    DiscardSink,
    FileSink,
    FileSource,
    Pipeline,
    RestartStrategy,
    TumblingWindows,
    WatermarkStrategy,
    read_committed,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.plan.graph import FORWARD
from airflow_checkpoint_provider.engine.runtime.host.channels import LocalChannel, RecordWriter
from airflow_checkpoint_provider.engine.runtime.task import mailbox as mailbox_module
from airflow_checkpoint_provider.engine.runtime.task.debloat import (
    INITIAL_CHANNEL_CREDIT,
    ThroughputMeter,
)
from airflow_checkpoint_provider.engine.runtime.task.mailbox import Mailbox

FILES, ROWS_PER_FILE = 4, 500_000
EVENTS_PER_SECOND = 400_000  # of event time: 5 s, five 1 s windows
WINDOW_MS = 1000
#: a Parquet batch of 65,536 rows of a file spans 0.65 s of event time
OUT_OF_ORDER_MS = 2000


def _write_events(directory: str) -> int:
    os.makedirs(directory)
    rng = np.random.default_rng(51)
    for f in range(FILES):
        # strided: every file goes through event time together (a source subtask reads
        # its files' batches in turns)
        ids = np.arange(f, FILES * ROWS_PER_FILE, FILES, dtype=np.int64)
        pq.write_table(pa.table({
            "ts": ids * 1000 // EVENTS_PER_SECOND,
            "k": ids % 10_000,
            "price": rng.integers(0, 1_000_000, len(ids)),
        }), os.path.join(directory, f"part-{f:05d}.parquet"), row_group_size=65_536)
    return FILES * ROWS_PER_FILE


def _run(root: str, data: str, target_ms: int | None) -> tuple[float, list[int], list[dict]]:
    out = os.path.join(root, "out")
    p = Pipeline(
        "multi-branch", batch_size=8192,
        checkpoint=CheckpointConfig(interval_ms=100, directory=os.path.join(root, "ckpt"),
                                    buffer_debloat_target_ms=target_ms),
        metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
        restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0))
    events = p.source(
        FileSource(data, format="parquet", parquet_batch_size=65_536), uid="events",
        parallelism=2,
        watermarks=WatermarkStrategy.for_bounded_out_of_orderness(OUT_OF_ORDER_MS, timestamp_field="ts"))
    # the steady branch: every row, keyed, vectorized
    (events.map_batches(steady, name="steady")
     .key_by("k").top_n(3, by="price", uid="top3", parallelism=2)
     .sink(DiscardSink(), uid="top3-out"))
    # the bursty branch: a row or two per batch, a window that emits when it fires
    (events.map_batches(window_max_per_batch, name="combiner")
     .key_by("w").window(TumblingWindows(WINDOW_MS))
     .reduce(higher, uid="window-max", parallelism=2)
     .map(SlowStart(), name="slow start", uid="slow-start", parallelism=2)
     .sink(FileSink(out), uid="window-out"))
    t0 = time.monotonic()
    result = p.run()
    wall = time.monotonic() - t0
    assert result.status == "FINISHED", result.failure_reason
    store = MetadataStore(p.metadata_url)
    try:  # the credit of the window's input channels at each checkpoint (debloat.py)
        credits = [t["credit_records"] for c in store.list_checkpoints(result.job_id)
                   for t in c.task_stats or [] if "window-max" in t.get("records", {})
                   and "credit_records" in t]
    finally:
        store.close()
    return wall, credits, list(read_committed(out))


@pytest.mark.timeout(300)
def test_debloating_keeps_a_bursty_branch_and_its_sibling_going(tmp_path):
    data = str(tmp_path / "events")
    rows = _write_events(data)
    off_s, _, off_rows = _run(str(tmp_path / "off"), data, None)
    on_s, credits, on_rows = _run(str(tmp_path / "on"), data, 1000)  # the default target
    windows = rows // EVENTS_PER_SECOND * 1000 // WINDOW_MS
    # the bursty branch emitted every window, once, the same maxima as without debloating
    assert sorted(r["w"] for r in on_rows) == list(range(windows))
    assert sorted((r["w"], r["price"]) for r in on_rows) == sorted(
        (r["w"], r["price"]) for r in off_rows)
    # The window gets a row or two per batch and waits for input most of the time: what it
    # measures (a few records a second, its busy time being watermarks and snapshots) is
    # a lower bound, and must not shrink its credit. Before: 8 records (the floor) from its
    # first measurement on, which also counted the task's start-up as busy.
    print(f"\noff {off_s:.1f} s, default {on_s:.1f} s, window credit {credits}")
    assert credits, "no checkpoint recorded the window's credit"
    assert min(credits) >= INITIAL_CHANNEL_CREDIT, credits
    # and the job took about as long as without debloating (both runs side by side: a
    # loaded machine slows both)
    assert on_s <= 2 * off_s + 5, (on_s, off_s)


# -- the mechanism, step by step ----------------------------------------------------------
def test_a_tasks_start_up_is_not_counted_as_busy():
    """Opening operators, restoring and connecting before the first records: the meter's
    clock starts at the first records processed (before: a first measurement of 1-500
    records/s for consumers of 100,000s a second)."""
    meter = ThroughputMeter()
    assert not meter.add(1, 100.0)  # the first item: the clock starts after it
    assert meter.add(1_000, 100.25)
    assert meter.rate == pytest.approx(4_000)


def test_only_a_bottleneck_shrinks_its_credit(monkeypatch):
    """A window behind a combiner gets a row or two per batch and waits for input most of
    the time; its busy time is watermarks, timers and snapshots: it measures a few records
    a second, a lower bound of what it can process. Before, its credit fell to the floor
    (8 records) on that and stayed there. Its credit shrinks only while it is the
    bottleneck: busy, with records waiting for it."""
    clock = [0.0]
    monkeypatch.setattr(mailbox_module.time, "monotonic", lambda: clock[0])
    m = Mailbox(8, channels=2, target_s=1.0, initial_credit=128, max_credit=10_000)
    m.meter = ThroughputMeter(now=0.0)
    for _ in range(4):  # 2 records per 0.6 s, 0.25 s of it busy: 8 records/s
        m.meter.add_idle(0.35)
        clock[0] += 0.6
        m.consumed(0, 2)
    assert m.credit_per_channel == 128, "a lower bound does not shrink the credit"
    for _ in range(10):  # now the bottleneck, busy all the time: 2,000 records/s
        clock[0] += 0.5
        m.consumed(0, 1_000)
    credit = m.credit_per_channel
    assert credit == pytest.approx(700, abs=5), "2,000/s x 70% of 1 s over 2 channels"
    for _ in range(4):  # starved again (its sender slowed down): keeps its credit
        m.meter.add_idle(0.45)
        clock[0] += 0.7
        m.consumed(0, 20)
    assert m.credit_per_channel == credit
    for _ in range(2):  # busy firing a window, with no records waiting: keeps it too
        clock[0] += 0.5
        m.consumed(0, 2)
    assert m.credit_per_channel == credit
    # a slowdown while busy with records waiting for it shrinks it at once, as before
    m.put_data(("records", 1, [{"i": i} for i in range(200)]))
    for _ in range(2):
        clock[0] += 0.5
        m.consumed(0, 100)
    assert m.credit_per_channel == 70, "200/s x 70% of 1 s over 2 channels"


def test_a_mostly_idle_consumer_is_measured_and_its_credit_grows(monkeypatch):
    """A consumer fed small reads (its source held by a credit) is busy a few percent of
    the time: it was not measured again, so its credit, and its source's reads, stayed
    small. Measured anyway (a lower bound), its credit grows."""
    clock = [0.0]
    monkeypatch.setattr(mailbox_module.time, "monotonic", lambda: clock[0])
    m = Mailbox(8, channels=1, target_s=1.0, initial_credit=128, max_credit=100_000)
    m.meter = ThroughputMeter(now=0.0)
    for _ in range(40):  # 128 records in 1 ms every 50 ms: 128,000 records/s when busy
        m.meter.add_idle(0.049)
        clock[0] += 0.05
        m.consumed(0, 128)
    assert m.credit_per_channel > 10_000


def test_a_source_reads_its_outputs_credit_in_its_own_records():
    """A chain that cuts a batch to a few rows (a combiner) in front of a writer: the
    writer's credit is in those rows. The source reads by what a read puts on each output,
    not a batch of at most that many source records."""
    from airflow_checkpoint_provider.engine.runtime.task.debloat import SourceReadSize

    box = Mailbox(8, channels=1, target_s=1.0, initial_credit=8, max_credit=10_000)
    gate = threading.Event()
    gate.set()
    writer = RecordWriter(FORWARD, [LocalChannel(box, gate, 0)], None, 128, 0)
    size = SourceReadSize([writer])
    assert size.room(65_536) == 8, "nothing measured yet: as before"
    writer.emitted += 2  # a read of 8 records put 2 rows on this output
    size.read(8)
    assert size.room(65_536) == 32
    writer.emitted += 2  # and 2 of a read of 32
    size.read(32)
    assert size.room(65_536) > 32
    for _ in range(20):  # (the smoothed ratio halves at most per read)
        writer.emitted += 2
        size.read(size.room(65_536))
    assert size.room(65_536) == 65_536
    box.reserve(0, 8)  # no credit left on the output: the source waits (backpressure)
    assert size.room(65_536) == 0
