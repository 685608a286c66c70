from airflow_checkpoint_provider.engine.runtime.task.alignment import BarrierHandler


def kinds(actions):
    return [a[0] for a in actions]


def test_exactly_once_blocks_channel_until_barrier_arrived_on_all_channels():
    h = BarrierHandler(3, exactly_once=True)
    assert kinds(h.on_barrier(0, 1)) == ["block"]
    assert h.blocked == {0}
    assert kinds(h.on_barrier(2, 1)) == ["block"]
    actions = h.on_barrier(1, 1)
    assert actions[0] == "block" or actions[0][0] == "block"
    assert ("checkpoint", 1) == actions[1][:2]
    assert actions[2] == ("release", [0, 1, 2])
    assert h.blocked == set()


def test_at_least_once_never_blocks_and_snapshots_on_last_barrier():
    h = BarrierHandler(2, exactly_once=False)
    assert h.on_barrier(0, 1) == [("release", [0])]
    actions = h.on_barrier(1, 1)
    assert actions[0] == ("release", [1])
    assert actions[1][:2] == ("checkpoint", 1)


def test_closed_channel_counts_as_arrived():
    h = BarrierHandler(2)
    h.on_barrier(0, 5)
    actions = h.on_channel_closed(1)
    assert actions[0][:2] == ("checkpoint", 5)
    assert actions[1] == ("release", [0])


def test_cancel_marker_aborts_alignment_and_releases_channels():
    h = BarrierHandler(2)
    h.on_barrier(0, 4)
    actions = h.on_cancel(1, 4)
    assert ("release", [0]) in actions
    assert ("cancel", 4, None) in actions
    # the late barrier of the cancelled checkpoint only releases its channel
    assert h.on_barrier(1, 4) == [("release", [1])]


def test_newer_barrier_subsumes_unfinished_alignment_and_declines_it():
    h = BarrierHandler(2)
    h.on_barrier(0, 1)
    actions = h.on_barrier(1, 2)
    assert ("release", [0]) in actions
    cancels = [a for a in actions if a[0] == "cancel"]
    assert cancels and cancels[0][1] == 1 and cancels[0][2]  # declined with a reason
    assert h.current == 2 and h.blocked == {1}


def test_single_channel_snapshots_immediately():
    h = BarrierHandler(1)
    actions = h.on_barrier(0, 9)
    assert [a[0] for a in actions] == ["block", "checkpoint", "release"]
