"""Records replayed from an unaligned checkpoint are processed at the checkpoint's
processing time, so restored state with a TTL that the downtime would expire on the wall
clock takes them (chaos cell q12/local/rocksdb/unaligned seed 2: processing-time windows
keyed upstream, their counts in aggregate(ttl=20 s); the in-flight records of a window
were counted from zero after a 60 s restart, and its row committed a lower count)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from operator_harness import open_op

from airflow_checkpoint_provider.engine import FileSink, GeneratorSource, Pipeline
from airflow_checkpoint_provider.engine.checkpoint.restore import assign_restore
from airflow_checkpoint_provider.engine.runtime.batches import encode_arrow
from airflow_checkpoint_provider.engine.runtime.task.checkpointing import (
    SubtaskCheckpointCoordinator,
)
from airflow_checkpoint_provider.engine.serialization import packb
from airflow_checkpoint_provider.engine.snapshot.codec import LoadedSnapshot
from airflow_checkpoint_provider.engine.snapshot.handles import ChannelStateHandle
from airflow_checkpoint_provider.engine.state import ttl
from airflow_checkpoint_provider.engine.state.backend import write_state_file

T0 = 1_800_000_000_000  # the checkpoint's time (epoch ms)
DOWNTIME_MS = 60_000


@pytest.fixture
def wall(monkeypatch):
    clock = {"ms": T0}
    monkeypatch.setattr(ttl, "wall_ms", lambda: clock["ms"])
    return clock


def _count_node(tmp_path):
    p = Pipeline("q12-like", max_parallelism=128)
    (p.source(GeneratorSource(1), uid="src").key_by("k")
      .aggregate(uid="count", ttl=20_000, bid_count="count")
      .sink(FileSink(str(tmp_path / "out")), uid="out"))
    return p.execution_graph().node_by_uid("count")[1]


def _counts(batch) -> list[int]:
    return batch.to_pydict()["bid_count"]


def _keys(n):
    return pa.RecordBatch.from_pydict({"k": [7] * n})


def test_the_replay_runs_at_the_checkpoints_processing_time(tmp_path, wall):
    """The task side: the in-flight records go through the chain with processing time at
    the checkpoint's timestamp (from the restore spec), the wall clock before and after."""
    items = [[0, "arrow", encode_arrow(_keys(3)).to_pybytes()]]
    handle, _, _ = write_state_file(str(tmp_path), "channel-1-0", "inflight", packb(items),
                                    {"records": 3})
    seen = []

    class Task:  # the task as its checkpoint coordinator sees it
        def push_input(self, channel, records):
            seen.append((channel, records.num_rows, ttl.now_ms()))

    checkpointing = SubtaskCheckpointCoordinator.__new__(SubtaskCheckpointCoordinator)
    checkpointing.task, checkpointing.name = Task(), "t"
    checkpointing.channel_state = (str(tmp_path), ChannelStateHandle.from_dict(
        handle, location=str(tmp_path), field="channel_state"), T0)
    wall["ms"] = T0 + DOWNTIME_MS
    checkpointing.replay_channel_state()
    assert seen == [(0, 3, T0)]
    assert ttl.now_ms() == T0 + DOWNTIME_MS and checkpointing.channel_state is None


def test_restore_specs_carry_the_snapshots_time(tmp_path):
    p = Pipeline("q12-like", max_parallelism=128)
    (p.source(GeneratorSource(1), uid="src").key_by("k")
      .aggregate(uid="count", ttl=20_000, bid_count="count")
      .sink(FileSink(str(tmp_path / "out")), uid="out"))
    graph = p.execution_graph()
    vertex, _ = graph.node_by_uid("count")
    channel = {"path": "channel-1-0", "size": 3, "sha256": "0" * 64, "records": 1}
    doc = {"job_id": "j", "job_name": "q12-like", "checkpoint_id": 3, "kind": "CHECKPOINT",
           "timestamp_ms": T0, "operators": {"count": {
               "kind": "keyed", "parallelism": 1, "max_parallelism": 128, "states": {},
               "subtasks": [{"index": 0, "operator_state": [], "keyed": None,
                             "key_group_range": [0, 127], "channel_state": channel}]}}}
    specs = assign_restore(LoadedSnapshot(str(tmp_path), doc), graph)
    assert specs[(vertex.id, 0)]["count"]["timestamp_ms"] == T0


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_restored_ttl_state_takes_records_replayed_at_the_checkpoint_time(tmp_path, wall,
                                                                          backend):
    node = _count_node(tmp_path)
    op = open_op(node, backend)
    assert _counts(op.process(_keys(5))) == [5]
    snap = op.snapshot(1)
    handle, _, _ = snap.keyed.write(str(tmp_path), "count-0", True)
    op.close()
    spec = {"directory": str(tmp_path), "states": snap.states, "keyed": [handle],
            "operator_state": snap.operator_state}
    wall["ms"] = T0 + DOWNTIME_MS  # the restart took longer than the TTL
    replayed = open_op(node, backend, restore=spec)
    with ttl.processing_time_at(T0):
        assert _counts(replayed.process(_keys(3))) == [8], "the window's count goes on"
    replayed.close()
    # on the wall clock the same key expired (what the replay did before): counted from 0
    live = open_op(node, backend, restore=spec)
    assert _counts(live.process(_keys(3))) == [3]
    live.close()
