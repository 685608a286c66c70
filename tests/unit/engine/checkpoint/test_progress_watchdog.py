"""The progress watchdog on synthetic per-task stats (issue 51, item 5): a stall is
reported after the threshold naming the operator where records stopped, cleared when it
moves again; an idle job is not stalled."""

from __future__ import annotations

from airflow_checkpoint_provider.engine.checkpoint.progress_watch import (
    RECORDS,
    WATERMARK,
    ProgressWatchdog,
    WatchedChain,
)

THRESHOLD = 5.0


def pipeline(event_time: bool = False) -> ProgressWatchdog:
    """source -> parse (own chain, keyed) -> enrich (own chain) -> sink (chained)."""
    chains = [
        WatchedChain(0, ("source",), is_source=True, parallelism=2),
        WatchedChain(1, ("parse",), inputs=((0, 1),), event_time=event_time, parallelism=2),
        WatchedChain(2, ("enrich", "sink"), inputs=((1, 1),), event_time=event_time,
                     parallelism=1),
    ]
    watch = ProgressWatchdog(chains, THRESHOLD)
    watch.reset(0.0)
    return watch


def feed(watch, source: int, parse: tuple[int, int], enrich: tuple[int, int],
         sink: int, wm: int | None = None) -> None:
    """Cumulative counts, split over the subtasks of the parallel chains."""
    watch.on_counts((0, 0), {"source": [0, source // 2]}, None)
    watch.on_counts((0, 1), {"source": [0, source - source // 2]}, None)
    watch.on_counts((1, 0), {"parse": [parse[0] // 2, parse[1] // 2]}, wm)
    watch.on_counts((1, 1), {"parse": [parse[0] - parse[0] // 2, parse[1] - parse[1] // 2]}, wm)
    watch.on_counts((2, 0), {"enrich": list(enrich), "sink": [sink, sink]}, wm)


def test_a_downstream_operator_that_stops_is_reported_after_the_threshold_and_cleared():
    watch = pipeline()
    # everything moves for a while
    for t in range(5):
        n = 100 * (t + 1)
        feed(watch, n, (n, n), (n, n), n)
        assert watch.check(float(t)) is None
    # enrich stops at 500 records; the source and parse go on until backpressure stops
    # them too: records queue in front of enrich and in front of parse
    for t in range(5, 20):
        src = min(500 + 100 * (t - 4), 1200)
        feed(watch, src, (min(src, 1000), min(src, 1000)), (500, 500), 500)
        stall = watch.check(float(t))
        if t < 4 + THRESHOLD:
            assert stall is None, t
    assert stall is not None
    assert stall.kind == RECORDS
    assert stall.operator == "enrich"  # not parse, which only waits behind it
    assert stall.queued == 500
    assert stall.chain == ("enrich", "sink")
    assert "enrich" in stall.detail
    assert stall.seconds(19.0) >= THRESHOLD
    doc = stall.to_json(19.0, THRESHOLD)
    assert doc["operator"] == "enrich" and doc["kind"] == "records" and doc["since"]
    # enrich moves again: no stall
    feed(watch, 1300, (1100, 1100), (600, 600), 600)
    assert watch.check(20.0) is None
    assert watch.stall is None


def test_an_idle_job_with_no_input_is_not_stalled():
    watch = pipeline()
    feed(watch, 300, (300, 300), (300, 300), 300)
    for t in range(0, 60, 5):
        assert watch.check(float(t)) is None


def test_a_job_that_never_read_is_not_stalled():
    watch = pipeline()
    for t in range(0, 60, 5):
        assert watch.check(float(t)) is None


def test_a_checkpoint_ack_brings_lagging_counts_up_to_date():
    """A report lags its task's work; the ack's counts (the barrier's cut) replace a lower
    count, never a higher one."""
    watch = pipeline()
    feed(watch, 400, (400, 400), (380, 380), 380)  # enrich's last report lags
    assert watch.check(0.0) is None
    watch.on_counts((2, 0), {"enrich": [400, 400], "sink": [400, 400]})  # its ack
    watch.on_counts((2, 0), {"enrich": [390, 390], "sink": [390, 390]})  # an older report
    for t in range(1, 30):
        assert watch.check(float(t)) is None


def test_a_frozen_watermark_while_records_arrive_is_a_stall_naming_where_it_stopped():
    watch = pipeline(event_time=True)
    for t in range(20):
        n = 100 * (t + 1)
        wm = min(1_000 * t, 4_000)  # the watermark stops at t=4; records keep flowing
        feed(watch, n, (n, n), (n, n), n, wm=wm)
        stall = watch.check(float(t))
        if t < 4 + THRESHOLD:
            assert stall is None, t
    assert stall is not None and stall.kind == WATERMARK
    assert stall.operator == "parse"  # the first chain from the sources
    # an idle event-time job (no records, no watermark) is not stalled
    for t in range(20, 40):
        stall = watch.check(float(t))
    assert stall is None


def test_a_new_attempt_starts_over():
    watch = pipeline()
    feed(watch, 1000, (1000, 1000), (500, 500), 500)
    for t in range(10):
        watch.check(float(t))
    assert watch.stall is not None
    watch.reset(10.0)
    assert watch.stall is None
    assert watch.check(11.0) is None


def test_a_source_chain_that_blocks_is_reported_when_it_takes_no_checkpoint():
    """source -> map chained: no queued input to count; the task neither moves records nor
    acks the checkpoint that waits for it."""
    watch = ProgressWatchdog([WatchedChain(0, ("gen", "slow", "out"), is_source=True)], THRESHOLD)
    watch.reset(0.0)
    watch.on_counts((0, 0), {"gen": [0, 100], "slow": [100, 100], "out": [100, 100]})
    watch.on_ack((0, 0), 1.0)
    # idle: the task acks every checkpoint, nothing is awaited for long
    for t in range(2, 20):
        watch.on_ack((0, 0), float(t))
        assert watch.check(float(t), {(0, 0)}) is None
    # blocked: its last ack at t=19; a pending checkpoint waits for it from t=20 on
    for t in range(20, 19 + int(THRESHOLD)):
        assert watch.check(float(t), {(0, 0)}) is None
    stall = watch.check(19.0 + THRESHOLD, {(0, 0)})
    assert stall is not None and stall.kind == RECORDS
    assert stall.operator == "slow" and stall.chain == ("gen", "slow", "out")
    # with no checkpoint pending (checkpointing off) nothing can be told: not reported
    assert watch.check(30.0, set()) is None


def test_sparse_event_time_input_whose_watermark_follows_a_moment_later_is_not_stalled():
    """A record now and then, further apart than the threshold; its watermark is seen a
    moment after it (the source emits watermarks on an interval)."""
    watch = pipeline(event_time=True)
    n = 0
    for t in range(0, 120):
        if t % 8 == 0:  # a record
            n += 1
            feed(watch, n, (n, n), (n, n), n, wm=(n - 1) or None)
        elif t % 8 == 1:  # its watermark
            feed(watch, n, (n, n), (n, n), n, wm=n)
        assert watch.check(float(t)) is None, t


def test_a_chain_whose_counts_look_stale_but_that_acks_every_checkpoint_is_not_stalled():
    """A report lagging its task's work (the ack's counts cannot fix a count taken after
    the barrier) is not a stall while the chain acks the checkpoints going by; once its
    acks stop, it is."""
    watch = pipeline()
    feed(watch, 400, (400, 400), (399, 399), 399)  # one record emitted after a barrier
    for t in range(0, 30):
        for task in ((0, 0), (0, 1), (1, 0), (1, 1), (2, 0)):
            watch.on_ack(task, float(t))
        assert watch.check(float(t)) is None, t
    for t in range(30, 29 + int(THRESHOLD)):  # acks stop: the barrier does not get through
        assert watch.check(float(t)) is None, t
    stall = watch.check(29.0 + THRESHOLD)
    assert stall is not None and stall.operator == "enrich" and stall.queued == 1
    assert stall.since == 29.0  # its last ack


def test_a_chain_whose_input_ended_is_not_stalled():
    watch = pipeline()
    feed(watch, 400, (400, 400), (399, 399), 399)  # its final count was not reported
    ended = {(1, 0), (1, 1), (2, 0)}
    for t in range(0, 30):
        assert watch.check(float(t), set(), ended) is None, t
