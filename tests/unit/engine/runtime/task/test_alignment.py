from airflow_checkpoint_provider.engine.runtime.task.alignment import (
    BarrierHandler,
    Block,
    Cancel,
    Release,
    Snapshot,
)


def kinds(actions):
    return [type(a) for a in actions]


def test_exactly_once_blocks_channel_until_barrier_arrived_on_all_channels():
    h = BarrierHandler(3, exactly_once=True)
    assert h.on_barrier(0, 1) == [Block(0)]
    assert h.blocked == {0}
    assert kinds(h.on_barrier(2, 1)) == [Block]
    actions = h.on_barrier(1, 1)
    assert actions[0] == Block(1)
    assert isinstance(actions[1], Snapshot) and actions[1].checkpoint_id == 1
    assert actions[2] == Release((0, 1, 2))
    assert h.blocked == set()


def test_at_least_once_never_blocks_and_snapshots_on_last_barrier():
    h = BarrierHandler(2, exactly_once=False)
    assert h.on_barrier(0, 1) == [Release((0,))]
    actions = h.on_barrier(1, 1)
    assert actions[0] == Release((1,))
    assert isinstance(actions[1], Snapshot) and actions[1].checkpoint_id == 1


def test_closed_channel_counts_as_arrived():
    h = BarrierHandler(2)
    h.on_barrier(0, 5)
    actions = h.on_channel_closed(1)
    assert isinstance(actions[0], Snapshot) and actions[0].checkpoint_id == 5
    assert actions[1] == Release((0,))


def test_cancel_marker_aborts_alignment_and_releases_channels():
    h = BarrierHandler(2)
    h.on_barrier(0, 4)
    actions = h.on_cancel(1, 4)
    assert Release((0,)) in actions
    assert Cancel(4, None) in actions
    # the late barrier of the cancelled checkpoint only releases its channel
    assert h.on_barrier(1, 4) == [Release((1,))]


def test_newer_barrier_subsumes_unfinished_alignment_and_declines_it():
    h = BarrierHandler(2)
    h.on_barrier(0, 1)
    actions = h.on_barrier(1, 2)
    assert Release((0,)) in actions
    cancels = [a for a in actions if isinstance(a, Cancel)]
    assert cancels and cancels[0].checkpoint_id == 1 and cancels[0].reason  # declined
    assert h.current == 2 and h.blocked == {1}


def test_single_channel_snapshots_immediately():
    h = BarrierHandler(1)
    actions = h.on_barrier(0, 9)
    assert kinds(actions) == [Block, Snapshot, Release]
