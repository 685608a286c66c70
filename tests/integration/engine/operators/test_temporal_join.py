"""The event-time temporal join (``FOR SYSTEM_TIME AS OF``): versions valid at the probe's
time (inclusive), deletes, inner and left, out-of-order versions, late rows, state clean-up
by watermark, a static table (no event time) read fully first, restore at another
parallelism, on both state backends, against pandas' merge_asof; the end-to-end and
failure-injection runs are in test_broadcast.py (one job holds both operators)."""

from __future__ import annotations

import json
import os

import pytest
from operator_harness import BACKENDS, MAXP, open_op

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
    PipelineDefinitionError,
    WatermarkStrategy,
    read_committed,
)
from airflow_checkpoint_provider.engine.eventtime import MAX_WATERMARK
from airflow_checkpoint_provider.engine.state.keygroups import (
    key_group_for,
    key_group_range_for,
)

WM = WatermarkStrategy.for_bounded_out_of_orderness(0, timestamp_field="ts")


def temporal_node(how="inner", table_time=True, fn=None):
    p = Pipeline("t")
    probe = p.source(GeneratorSource(1), uid="probe", watermarks=WM)
    table = p.source(GeneratorSource(1), uid="table", watermarks=WM if table_time else None)
    probe.key_by("k").temporal_join(table.key_by("k"), how=how).process(
        fn or (lambda o, r: {"id": o["id"], "price": r and r["price"]}), uid="tj")
    return p.job_graph().nodes[-1]


def probe(i, ts, k="x"):
    return {"id": i, "k": k, "ts": ts}


def version(price, ts, k="x", op=None):
    return {"k": k, "price": price, "ts": ts, **({"_op": op} if op else {})}


def fired(op, watermark):
    return sorted((r["id"], r["price"]) for b in op.on_watermark(watermark) for r in b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["inner", "left"])
def test_a_probe_joins_the_version_valid_at_its_time_and_deletes_end_a_row(backend, how):
    op = open_op(temporal_node(how), backend)
    op.process_input(2, [version(10, 100), version(11, 200, op="+U"), version(0, 300, op="-D"),
                         version(12, 400, op="+I")])
    # probes before the first version, on a version's time (inclusive), between versions,
    # on and after the delete, and after the row came back
    op.process_input(1, [probe(1, 99), probe(2, 100), probe(3, 150), probe(4, 299),
                         probe(5, 300), probe(6, 350), probe(7, 400), probe(8, 999)])
    got = fired(op, MAX_WATERMARK)
    matched = [(2, 10), (3, 10), (4, 11), (7, 12), (8, 12)]
    unmatched = [(1, None), (5, None), (6, None)] if how == "left" else []
    assert got == sorted(matched + unmatched)
    assert op.state_rows() == (0, 1), "only the key's current row is left"
    op.close()


def test_probes_wait_for_the_watermark_so_versions_arriving_later_still_count():
    op = open_op(temporal_node("left"))
    op.process_input(1, [probe(1, 150)])
    assert fired(op, 120) == [], "the probe waits until the watermark reaches its time"
    op.process_input(2, [version(10, 140), version(11, 160)])   # out of order, not late
    assert fired(op, 150) == [(1, 10)]


def test_rows_of_either_input_behind_the_watermark_are_late_dropped_and_counted():
    op = open_op(temporal_node("left"))
    op.process_input(2, [version(10, 100)])
    op.on_watermark(200)
    op.process_input(1, [probe(1, 200), probe(2, 201)])
    op.process_input(2, [version(0, 150, op="-D")])  # would revive nothing, but is late
    assert op.dropped_late == 2
    assert fired(op, 201) == [(2, 10)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_keeps_one_version_per_key_behind_the_watermark(backend):
    op = open_op(temporal_node("inner"), backend)
    peak = (0, 0)
    for t in range(0, 20_000, 100):  # 20 s, 10 keys, a new version and 10 probes per 100 ms
        op.process_input(2, [version(t, t + j, k=f"k{j}") for j in range(10)])
        op.process_input(1, [probe(t + j, t + j, k=f"k{j % 10}") for j in range(0, 100, 10)])
        op.on_watermark(t - 200)
        rows = op.state_rows()
        peak = (max(peak[0], rows[0]), max(peak[1], rows[1]))
    assert peak[0] <= 40 and peak[1] <= 40, f"bounded by the watermark lag, got {peak}"
    op.process_input(2, [version(0, 30_000, k="k0", op="-D")])
    op.on_watermark(MAX_WATERMARK)
    assert op.state_rows() == (0, 9), "one current row per key; k0 was deleted"
    op.close()


def test_a_table_without_time_is_the_last_row_per_key_valid_since_always():
    op = open_op(temporal_node("left", table_time=False))
    op.process_input(2, [version(10, 0), version(11, 0), version(20, 0, k="y"),
                         version(0, 0, k="y", op="-D"), version(30, 0, k="z")])
    op.process_input(1, [probe(1, 5), probe(2, 5, k="y"), probe(3, 5, k="z"),
                         probe(4, 5, k="w")])
    assert fired(op, MAX_WATERMARK) == [(1, 11), (2, None), (3, 30), (4, None)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("new", [1, 3])
def test_temporal_join_state_restores_at_another_parallelism(tmp_path, backend, new):
    """Versions, waiting probes, their timers and the watermark move with their key groups."""
    old = open_op(temporal_node("left"), backend)
    keys = [f"k{i}" for i in range(40)]
    old.process_input(2, [version(i, 1000, k) for i, k in enumerate(keys)])
    old.process_input(1, [probe(i, 1500, k) for i, k in enumerate(keys)])
    old.on_watermark(1200)
    snap = old.snapshot(1)
    handle, _, _ = snap.keyed.write(str(tmp_path), "tj-0", True)
    spec = {"directory": str(tmp_path), "states": snap.states, "keyed": [handle],
            "operator_state": snap.operator_state}
    old.close()
    got = []
    for sub in range(new):
        op = open_op(temporal_node("left"), backend, key_group_range_for(sub, new, MAXP),
                     spec, sub, new)
        assert op.watermark == 1200
        mine = [(i, k) for i, k in enumerate(keys)
                if key_group_for(k, MAXP) in op.backend.key_groups]
        op.process_input(2, [version(100 + i, 1400, k) for i, k in mine if i % 2])
        got += fired(op, MAX_WATERMARK)
        op.close()
    assert sorted(got) == [(i, 100 + i if i % 2 else i) for i in range(40)]


def test_the_dsl_refuses_temporal_joins_it_cannot_run():
    p = Pipeline("t")
    timed = p.source(GeneratorSource(1), uid="a", watermarks=WM)
    untimed = p.source(GeneratorSource(1), uid="b")
    with pytest.raises(PipelineDefinitionError, match="probe .first. input needs event time"):
        untimed.key_by("k").temporal_join(timed.key_by("k")).process(uid="tj")
    with pytest.raises(PipelineDefinitionError, match="how="):
        timed.key_by("k").temporal_join(untimed.key_by("k"), how="full")
    with pytest.raises(PipelineDefinitionError, match="key the table stream"):
        timed.key_by("k").temporal_join(untimed)


@pytest.mark.timeout(60)
def test_a_stream_joins_a_bounded_file_table_read_fully_first(workdir):
    """A JSON-lines dimension table without event time (with a delete): every probe, even
    the earliest, sees the table's final rows, because probes wait until the table ended."""
    from airflow_checkpoint_provider.engine import FileSource

    table_dir = workdir / "table"
    os.makedirs(table_dir)
    rows = [{"key": f"k{i}", "name": f"name-{i}"} for i in range(30)]
    rows += [{"key": "k3", "name": "renamed"}, {"key": "k4", "_op": "-D"}]
    (table_dir / "dim.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = Pipeline("static", checkpoint=CheckpointConfig(interval_ms=200,
                                                       directory=str(workdir / "ckpt")),
                 metadata_url="sqlite:///" + str(workdir / "meta.db"))
    events = p.source(GeneratorSource(2_000, num_keys=30, event_time_step_ms=1,
                                      start_ms=1_700_000_000_000), uid="events",
                      parallelism=2, watermarks=WM)
    dim = p.source(FileSource(str(table_dir), format="jsonl"), uid="dim")
    (events.key_by("key").temporal_join(dim.key_by("key"), how="left")
           .process(lambda e, d: {"id": e["id"], "key": e["key"], "name": d and d["name"]},
                    uid="named", parallelism=2)
           .sink(FileSink(str(workdir / "out")), uid="out"))
    assert p.run().status == "FINISHED"
    names = {r["key"]: r["name"] for r in rows if "name" in r}
    names["k4"] = None
    out = list(read_committed(str(workdir / "out")))
    assert len(out) == 2_000
    assert all(r["name"] == names[r["key"]] for r in out)
