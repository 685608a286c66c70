"""Two-input operators and joins: the semantics of the operators (interval bounds, late rows,
outer rows at the watermark, state clean-up, window joins, co-process state and timers shared
by both inputs, rescaled restore) on both state backends, the DSL's checks, and end-to-end
jobs compared with a reference computed in plain Python (tests/support/join_pipelines.py):
failure-free, exactly once under injected exceptions and SIGKILLed slots (heap, RocksDB,
unaligned checkpoints) and across a savepoint restored at another parallelism."""

from __future__ import annotations

import shutil

import pytest
from join_pipelines import (
    committed_co,
    committed_interval_join,
    committed_window_join,
    expected_co,
    expected_interval_join,
    expected_window_join,
    join_pipeline,
)
from operator_harness import BACKENDS, MAXP, open_op, two_sources
from pipelines import Background, FaultPlan

from airflow_checkpoint_provider.engine import (
    FileSink,
    GeneratorSource,
    KeyedCoProcessFunction,
    Pipeline,
    PipelineDefinitionError,
    ProcessJoinFunction,
    SlidingWindows,
    TumblingWindows,
)
from airflow_checkpoint_provider.engine.eventtime import MAX_WATERMARK
from airflow_checkpoint_provider.engine.state.keygroups import (
    key_group_for,
    key_group_range_for,
)


# -- operators, driven directly ---------------------------------------------------------------
def interval_node(how="inner", lower=-10, upper=20, fn=None):
    p = Pipeline("t")
    a, b = two_sources(p)
    a.key_by("k").interval_join(b.key_by("k"), how=how).between(lower, upper).process(
        fn or (lambda left, right: {"l": left and left["id"], "r": right and right["id"]}),
        uid="ij")
    return p.job_graph().nodes[-1]


def window_join_node(assigner):
    p = Pipeline("t")
    a, b = two_sources(p)
    a.join(b).where("k").equal_to("k").window(assigner).apply(uid="wj")
    return p.job_graph().nodes[-1]


def row(i, ts, k="x"):
    return {"id": i, "k": k, "ts": ts}


def pairs(batches):
    return sorted(((r["l"], r["r"]) for b in batches for r in b),
                  key=lambda t: (t[0] is None, t[0] or 0, t[1] is None, t[1] or 0))


def fire(op, watermark):
    return pairs(op.on_watermark(watermark))


@pytest.mark.parametrize("backend", BACKENDS)
def test_interval_bounds_are_inclusive_whichever_side_comes_first(backend):
    op = open_op(interval_node(lower=-10, upper=20), backend)
    rights = [row(89, 89), row(90, 90), row(120, 120), row(121, 121)]
    assert op.process_input(2, rights) == []
    assert pairs([op.process_input(1, [row(1, 100)])]) == [(1, 90), (1, 120)]
    # the other way round: the left row first, the right rows join it as they come
    op2 = open_op(interval_node(lower=-10, upper=20), backend)
    op2.process_input(1, [row(1, 100)])
    assert pairs([op2.process_input(2, rights)]) == [(1, 90), (1, 120)]
    op.close()
    op2.close()


def test_rows_of_other_keys_never_match():
    op = open_op(interval_node())
    op.process_input(2, [row(10, 100, k="y")])
    assert op.process_input(1, [row(1, 100, k="x")]) == []


def test_rows_at_or_behind_the_watermark_are_late_dropped_and_counted():
    op = open_op(interval_node(lower=0, upper=100))
    op.process_input(2, [row(10, 250)])
    assert op.on_watermark(200) == []
    assert op.process_input(1, [row(1, 200)]) == [] and op.dropped_late == 1
    assert pairs([op.process_input(1, [row(2, 201)])]) == [(2, 10)]


@pytest.mark.parametrize("how,unmatched", [
    ("inner", []), ("left", [(1, None)]), ("right", [(None, 12)]),
    ("full", [(1, None), (None, 12)])])
def test_outer_rows_are_emitted_once_the_watermark_passes_their_bound(how, unmatched):
    # left 1 at 100 can match right rows at 90..120: it is unmatched once the watermark is
    # 120; right 12 at 200 can match left rows at 180..210: unmatched at watermark 210
    op = open_op(interval_node(how, lower=-10, upper=20))
    op.process_input(1, [row(1, 100), row(2, 150)])
    op.process_input(2, [row(11, 140), row(12, 200)])  # 11 matches 2 (140 in 140..170)
    assert fire(op, 119) == []
    assert fire(op, 120) == [u for u in unmatched if u[0] == 1]
    assert fire(op, 209) == []
    assert fire(op, 210) == [u for u in unmatched if u[1] == 12]
    assert fire(op, MAX_WATERMARK) == [] and op.buffered_rows() == 0


def test_a_row_that_arrives_past_its_own_bound_joins_the_buffer_and_is_not_kept():
    # upper < 0: a left row at t matches right rows at t-50..t-20. With the watermark at 90,
    # left 2 at 100 is not late but no right row to come (> 90) can match it (100-20 <= 90):
    # it probes the buffer, is not kept, and being unmatched is emitted at once (left outer)
    op = open_op(interval_node("left", lower=-50, upper=-20))
    op.process_input(2, [row(10, 95), row(11, 91)])
    op.on_watermark(90)
    assert pairs([op.process_input(1, [row(1, 120), row(2, 100)])]) == [
        (1, 10), (1, 11), (2, None)]
    assert op.buffered_rows() == 3, "left 1 (until 100) and both right rows are kept"
    assert fire(op, MAX_WATERMARK) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_stays_bounded_by_the_watermark_and_is_empty_at_the_end(backend):
    op = open_op(interval_node("full", lower=-30, upper=30), backend)
    peak = 0
    for t in range(0, 20_000, 100):  # 20 s of event time, both sides, 10 keys
        op.process_input(1, [row(t + j, t + j, k=f"k{j % 10}") for j in range(0, 100, 5)])
        op.process_input(2, [row(t + j, t + j, k=f"k{j % 10}") for j in range(0, 100, 7)])
        op.on_watermark(t + 99 - 50)
        peak = max(peak, op.buffered_rows())
    assert peak < 60, "rows are dropped from the state as the watermark passes their bound"
    op.on_watermark(MAX_WATERMARK)
    assert op.buffered_rows() == 0
    op.close()


class Tagged(ProcessJoinFunction):
    def open(self, ctx):
        self.opened = True

    def process_element(self, left, right, ctx):
        yield {"l": left["id"], "r": right["id"], "at": ctx.timestamp, "key": ctx.current_key}


def test_a_process_join_function_sees_the_pair_time_and_key():
    op = open_op(interval_node(fn=Tagged()))
    op.process_input(1, [row(1, 100)])
    assert op.process_input(2, [row(2, 110)]) == [{"l": 1, "r": 2, "at": 110, "key": "x"}]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("new", [1, 3])
def test_interval_join_state_restores_at_another_parallelism(tmp_path, backend, new):
    """Buffered rows, their timers and the watermark move with their key groups."""
    old = open_op(interval_node("left", lower=0, upper=50), backend)
    keys = [f"k{i}" for i in range(40)]
    old.process_input(1, [row(i, 1000 + i, k) for i, k in enumerate(keys)])
    old.on_watermark(900)
    snap = old.snapshot(1)
    handle, _, _ = snap.keyed.write(str(tmp_path), "ij-0", True)
    spec = {"directory": str(tmp_path), "states": snap.states, "keyed": [handle],
            "operator_state": snap.operator_state}
    old.close()
    got = []
    for sub in range(new):
        op = open_op(interval_node("left", lower=0, upper=50), backend,
                     key_group_range_for(sub, new, MAXP), spec, sub, new)
        assert op.watermark == 900, "the watermark is restored"
        mine = [(i, k) for i, k in enumerate(keys)
                if key_group_for(k, MAXP) in op.backend.key_groups]
        got += pairs([op.process_input(2, [row(100 + i, 1010 + i, k) for i, k in mine])])
        assert op.process_input(1, [row(999, 900, mine[0][1])]) == [] and op.dropped_late == 1
        got += fire(op, MAX_WATERMARK)
        op.close()
    assert sorted(got) == [(i, 100 + i) for i in range(40)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_tumbling_window_join_pairs_a_keys_rows_per_window(backend):
    op = open_op(window_join_node(TumblingWindows(100)), backend)
    op.process_input(1, [row(1, 10), row(2, 99), row(3, 150), row(4, 20, k="y")])
    op.process_input(2, [row(11, 50), row(12, 100), row(13, 60, k="z")])
    out = [r for b in op.on_watermark(99) for r in b]
    assert sorted((r["id"], r["window_start"], r["window_end"]) for r in out) == [
        (1, 0, 100), (2, 0, 100)], "left fields win in the default merge"
    assert op.process_input(1, [row(5, 99)]) == [] and op.dropped_late == 1
    assert op.on_watermark(MAX_WATERMARK) == [[{"id": 3, "k": "x", "ts": 150,
                                                "window_start": 100, "window_end": 200}]]
    assert op.buffered_rows() == 0
    op.close()


def test_sliding_window_join_pairs_rows_in_every_window_they_share():
    op = open_op(window_join_node(SlidingWindows(100, 50)))
    op.process_input(1, [row(1, 120)])   # windows 50..150 and 100..200
    op.process_input(2, [row(2, 160)])   # windows 100..200 and 150..250
    out = [r for b in op.on_watermark(MAX_WATERMARK) for r in b]
    assert [(r["window_start"], r["window_end"]) for r in out] == [(100, 200)]


class Shared(KeyedCoProcessFunction):
    def open(self, ctx):
        self.n = ctx.value_state("n", 0)

    def process_element1(self, record, ctx):
        self.n.update(self.n.value() + 1)
        ctx.timer_service.register_event_time_timer(ctx.timestamp + 10)
        return {"input": 1, "n": self.n.value(), "key": ctx.current_key}

    def process_element2(self, record, ctx):
        self.n.update(self.n.value() + 100)
        return {"input": 2, "n": self.n.value(), "key": ctx.current_key}

    def on_timer(self, timestamp, ctx):
        return {"timer": timestamp, "n": self.n.value(), "key": ctx.current_key}


@pytest.mark.parametrize("backend", BACKENDS)
def test_co_process_inputs_share_keyed_state_and_timers(backend):
    p = Pipeline("t")
    a, b = two_sources(p)
    a.connect(b).key_by("k", "key2").process(Shared(), uid="co")
    op = open_op(p.job_graph().nodes[-1], backend)
    assert op.process_input(1, [row(1, 5)]) == [{"input": 1, "n": 1, "key": "x"}]
    assert op.process_input(2, [{"key2": "x", "ts": 6}, {"key2": "y", "ts": 7}]) == [
        {"input": 2, "n": 101, "key": "x"}, {"input": 2, "n": 100, "key": "y"}]
    assert op.on_watermark(14) == []
    assert op.on_watermark(15) == [[{"timer": 15, "n": 101, "key": "x"}]]
    op.close()


class InputRecorder(KeyedCoProcessFunction):
    def __init__(self):
        self.events = []

    def process_element1(self, record, ctx):
        self.events.append((1, record["id"]))

    def process_element2(self, record, ctx):
        self.events.append((2, record["id"]))

    def snapshot_state(self, checkpoint_id):
        self.events.append(f"snapshot-{checkpoint_id}")


@pytest.mark.timeout(30)
def test_a_two_input_task_aligns_barriers_across_its_inputs_and_tags_records(tmp_path):
    """Records behind barrier 1 on input 1 wait for barrier 1 on input 2; every record
    reaches process_element1/2 of its own input (real task, real TCP channels)."""
    import socket
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from airflow_checkpoint_provider.engine.protocol import CheckpointBarrier, encode
    from airflow_checkpoint_provider.engine.protocol import frames as P
    from airflow_checkpoint_provider.engine.runtime.host.slot import _reader
    from airflow_checkpoint_provider.engine.runtime.task.environment import TaskEnvironment
    from airflow_checkpoint_provider.engine.runtime.task.mailbox import Finish, Mailbox
    from airflow_checkpoint_provider.engine.runtime.task.stream_task import StreamTask
    from airflow_checkpoint_provider.engine.serialization import packb

    rec = InputRecorder()
    p = Pipeline("align2")
    a = p.source(GeneratorSource(10), uid="a")
    b = p.source(GeneratorSource(10), uid="b")
    (a.connect(b).key_by("key").process(rec, uid="co")
      .sink(FileSink(str(tmp_path / "out")), uid="sink"))
    graph = p.execution_graph()
    vertex = next(v for v in graph.vertices if v.nodes[0].kind == "co_process")
    assert vertex.input_of_channels() == [1, 2]
    sent = []
    env = TaskEnvironment(job_id="j" * 8, job_name="align2", attempt=0, graph=graph,
                          job_dir=str(tmp_path / "ckpt"), exactly_once=True, batch_size=10,
                          send=lambda m: sent.append(encode(m)), upload_pool=ThreadPoolExecutor(1))
    mailbox, gates = Mailbox(8), {0: threading.Event(), 1: threading.Event()}
    for g in gates.values():
        g.set()
    task = StreamTask(env, vertex, 0, None, mailbox, [], gates)
    socks = []
    for ch in (0, 1):
        w, r = socket.socketpair()
        threading.Thread(target=_reader, args=(r, ch, mailbox, gates[ch]), daemon=True).start()
        socks.append(w)
    task.start()

    def records(sock, ids):
        P.send_frame(sock, P.RECORDS, packb([{"id": i, "key": f"k{i}"} for i in ids]))

    def wait_for(cond):
        deadline = time.monotonic() + 5
        while not cond():
            assert time.monotonic() < deadline, "condition not reached"
            time.sleep(0.01)

    barrier = CheckpointBarrier(1, 0, "CHECKPOINT", str(tmp_path / "chk-1")).encode()
    records(socks[0], [1, 2])
    P.send_frame(socks[0], P.BARRIER, barrier)
    records(socks[0], [3])             # behind barrier 1 on input 1
    records(socks[1], [10])            # before barrier 1 on input 2
    wait_for(lambda: (2, 10) in rec.events)
    time.sleep(0.3)                    # give the task every chance to (wrongly) process 3
    assert (1, 3) not in rec.events
    P.send_frame(socks[1], P.BARRIER, barrier)
    records(socks[1], [11])
    wait_for(lambda: {(1, 3), (2, 11)} <= set(rec.events))
    snap = rec.events.index("snapshot-1")
    assert set(rec.events[:snap]) == {(1, 1), (1, 2), (2, 10)}
    assert set(rec.events[snap + 1:]) == {(1, 3), (2, 11)}
    task.mailbox.put_control(Finish())


# -- the DSL's checks -------------------------------------------------------------------------
def test_the_dsl_refuses_joins_it_cannot_run():
    p = Pipeline("t")
    a, b = two_sources(p)
    plain = p.source(GeneratorSource(1), uid="c")
    with pytest.raises(PipelineDefinitionError, match="key both inputs"):
        a.connect(b).process(Shared(), uid="co")
    with pytest.raises(PipelineDefinitionError, match="KeyedCoProcessFunction"):
        a.connect(b).key_by("k").process(lambda r: r, uid="co")
    with pytest.raises(PipelineDefinitionError, match="itself"):
        a.connect(a)
    with pytest.raises(PipelineDefinitionError, match="lower bound"):
        a.key_by("k").interval_join(b.key_by("k")).between(10, 5)
    with pytest.raises(PipelineDefinitionError, match="how="):
        a.key_by("k").interval_join(b.key_by("k"), how="outer")
    with pytest.raises(PipelineDefinitionError, match="key the other stream"):
        a.key_by("k").interval_join(b)
    with pytest.raises(PipelineDefinitionError, match="second input has no watermark"):
        a.key_by("k").interval_join(plain.key_by("k")).between(0, 5).process(uid="ij")
    with pytest.raises(PipelineDefinitionError, match="where"):
        a.join(b).window(TumblingWindows(10)).apply(uid="wj")


def test_a_join_is_a_two_input_vertex_whose_channels_know_their_input():
    p = Pipeline("t")
    a, b = two_sources(p)
    a2 = a.map(lambda r: r)  # chained into a's vertex
    (a2.key_by("k").interval_join(b.key_by("k")).between(0, 5)
       .process(uid="ij", parallelism=3).sink(FileSink("/tmp/unused"), uid="out"))
    g = p.execution_graph()
    join = next(v for v in g.vertices if v.nodes[0].kind == "interval_join")
    assert [n.kind for n in join.nodes] == ["interval_join", "sink"], "the sink chains"
    assert join.input_of_channels() == [1, 2]  # one source subtask each


def test_reading_one_upstream_twice_is_refused_instead_of_hanging():
    # channels are addressed by upstream vertex: a second edge from it never connected
    p = Pipeline("t")
    a, _ = two_sources(p)
    a.union(a).sink(FileSink("/tmp/unused"), uid="out")
    with pytest.raises(PipelineDefinitionError, match="twice"):
        p.execution_graph()


# -- end to end ---------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["exactly_once", "at_least_once"])
def test_co_process_interval_and_window_joins_match_a_plain_python_reference(workdir, mode):
    result = join_pipeline(str(workdir), mode=mode).run()
    assert result.status == "FINISHED"
    assert committed_co(str(workdir)) == expected_co()
    assert committed_interval_join(str(workdir)) == expected_interval_join("left")
    assert committed_window_join(str(workdir)) == expected_window_join()


FAULTS = [("record", 1_500), ("kill", 3_500), ("record", 5_000)]


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend,unaligned", [("heap", False), ("rocksdb", False),
                                               ("heap", True)])
def test_joins_are_exactly_once_under_exceptions_and_sigkill(workdir, backend, unaligned):
    faults = FaultPlan(str(workdir / "faults"), FAULTS)
    result = join_pipeline(str(workdir), faults=faults, rate=5_000, state_backend=backend,
                           unaligned=unaligned).run()
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    assert result.restarts == len(faults.attempts_hit())
    assert committed_co(str(workdir)) == expected_co()
    assert committed_interval_join(str(workdir)) == expected_interval_join("left")
    assert committed_window_join(str(workdir)) == expected_window_join()
    assert committed_window_join(str(workdir)) == expected_window_join()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_joins_survive_a_savepoint_restored_at_another_parallelism(workdir, tmp_path_factory):
    # slow enough that the stop savepoint lands mid-stream: it waits for the pending checkpoint
    bg = Background(join_pipeline(str(workdir), rate=1_500, state_backend="rocksdb"))
    job = bg.wait_running(min_checkpoints=2, timeout=60)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    location = req.result["location"]
    partial = committed_interval_join(str(workdir))
    assert 0 < sum(partial.values()) < sum(expected_interval_join("left").values())
    restored = tmp_path_factory.mktemp("restored")
    for out in ("co", "ij", "wj"):
        shutil.copytree(workdir / out, restored / out)
    result = join_pipeline(str(restored), parallelism=3, join_parallelism=3,
                           state_backend="rocksdb").run(restore=location, trust_snapshot=True)
    assert result.status == "FINISHED" and result.restored_from == location
    assert committed_co(str(restored)) == expected_co()
    assert committed_interval_join(str(restored)) == expected_interval_join("left")
    assert committed_window_join(str(restored)) == expected_window_join()
