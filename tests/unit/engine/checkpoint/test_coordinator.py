"""Trigger rules and checkpoint lifecycle of the coordinator, with a fake clock."""

import os

import pytest

from airflow_checkpoint_provider.engine import CheckpointConfig, CheckpointDeclined
from airflow_checkpoint_provider.engine.checkpoint.coordinator import CheckpointCoordinator
from airflow_checkpoint_provider.engine.checkpoint.outcomes import (
    AckResult,
    CheckpointFailureReason,
    TaskAck,
)
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

TASKS = [(0, 0), (0, 1), (1, 0)]


class Recorder:
    def __init__(self):
        self.triggers, self.notifies, self.aborts = [], [], []


def make(tmp_path, **cfg):
    rec = Recorder()
    config = CheckpointConfig(**{"interval_ms": 100, "initial_delay_ms": 0, **cfg})
    c = CheckpointCoordinator(
        job_id="job1", job_name="j", job_dir=str(tmp_path / "j" / "job1"), config=config,
        tasks=TASKS, operator_info={"op": {"kind": "operator", "parallelism": 2, "max_parallelism": 128}},
        send_trigger=lambda chk, ts, kind, loc, unaligned: rec.triggers.append(chk),
        send_notify=rec.notifies.append, send_abort=rec.aborts.append, now=0.0)
    c.set_tasks_running(set(TASKS))
    return c, rec


def ack_all(c, chk, now, tasks=TASKS):
    result = None
    for t in tasks:
        result = c.receive_ack(chk, t, TaskAck.from_wire({"op": {"operator_state": [t[1]]}},
                                                         {"state_size": 10, "checkpointed_size": 10}), now)
    return result


def test_completes_when_every_task_acked_and_writes_metadata_last(tmp_path):
    c, rec = make(tmp_path)
    chk = c.maybe_trigger_periodic(0.0)
    assert chk == 1 and rec.triggers == [1]
    c.receive_ack(1, (0, 0), TaskAck(), 0.01)
    assert not os.path.exists(os.path.join(c.pending[1].location, "_metadata"))
    done = ack_all(c, 1, 0.02, TASKS[1:])
    assert done.checkpoint_id == 1 and rec.notifies == [1]
    snap = load_snapshot(done.location)
    assert snap.checkpoint_id == 1 and "op" in snap.operators


def test_trigger_is_declined_when_not_all_tasks_are_running(tmp_path):
    c, rec = make(tmp_path)
    c.set_tasks_running({(0, 0)})
    with pytest.raises(CheckpointDeclined, match="2 of 3 tasks are not running"):
        c.trigger(0.0)
    assert c.maybe_trigger_periodic(0.0) is None and rec.triggers == []


def test_max_concurrent_limits_checkpoints_in_flight(tmp_path):
    c, rec = make(tmp_path, max_concurrent=2)
    assert c.maybe_trigger_periodic(0.0) == 1
    assert c.maybe_trigger_periodic(0.1) == 2
    assert c.maybe_trigger_periodic(0.2) is None  # two in flight
    ack_all(c, 1, 0.25)
    assert c.maybe_trigger_periodic(0.3) == 3


def test_min_pause_delays_next_trigger_after_completion(tmp_path):
    c, rec = make(tmp_path, min_pause_ms=500)
    c.next_periodic = 0.0
    assert c.maybe_trigger_periodic(0.0) == 1
    ack_all(c, 1, 0.05)
    assert c.maybe_trigger_periodic(0.2) is None      # interval passed, pause not
    assert c.maybe_trigger_periodic(0.56) == 2         # after 0.05 + 0.5


def test_expired_checkpoint_is_aborted_and_its_files_deleted(tmp_path):
    c, rec = make(tmp_path, timeout_ms=1000, tolerable_failures=5)
    chk = c.trigger(0.0)
    loc = c.pending[chk].location
    os.makedirs(loc)
    open(os.path.join(loc, "x.state"), "wb").close()
    c.check_timeouts(0.5)
    assert chk in c.pending
    c.check_timeouts(1.01)
    c.cleaner.close()  # deletions run in the background: wait for them
    assert chk not in c.pending and rec.aborts == [chk] and not os.path.exists(loc)
    assert c.num_failed == 1 and c.job_failure is None
    # a late ack of the expired checkpoint is ignored
    assert ack_all(c, chk, 1.2) is None


def test_decline_aborts_the_checkpoint(tmp_path):
    c, rec = make(tmp_path, tolerable_failures=1)
    chk = c.trigger(0.0)
    c.receive_decline(chk, (1, 0), "disk full", 0.1)
    assert rec.aborts == [chk] and c.job_failure is None


def test_every_ack_has_a_result_and_every_abort_a_reason(tmp_path):
    c, rec = make(tmp_path, tolerable_failures=0)
    first = c.trigger(0.0)
    c.receive_ack(first, (0, 0), TaskAck(), 0.01)
    c.receive_ack(first, (0, 0), TaskAck(), 0.02)        # again: a duplicate
    c.receive_ack(first, (9, 9), TaskAck(), 0.02)        # a task it does not wait for
    c.receive_ack(first + 7, (0, 0), TaskAck(), 0.02)    # never triggered
    assert c.ack_results == {AckResult.SUCCESS: 1, AckResult.DUPLICATE: 1,
                             AckResult.NOT_AWAITED: 1, AckResult.UNKNOWN: 1}
    second = c.trigger(0.05)
    ack_all(c, second, 0.06)                             # completes, subsumes the first
    assert c.ack_results[AckResult.LAST] == 1
    assert c.failure_reasons == {CheckpointFailureReason.SUBSUMED: 1}
    c.abort_all("a slot was lost", 0.07)                 # nothing pending: no reason counted
    third = c.trigger(0.08)
    c.abort_all("a slot was lost", 0.09)
    assert c.failure_reasons[CheckpointFailureReason.JOB_FAILOVER] == 1
    assert c.job_failure is None                          # neither counts as a failure
    c.receive_decline(c.trigger(0.1), (0, 0), "disk full", 0.1)
    assert c.failure_reasons[CheckpointFailureReason.DECLINED] == 1
    assert "tolerable number of failed checkpoints (0)" in c.job_failure
    assert rec.aborts[-2:] == [third, third + 1]


def test_tolerable_failures_exceeded_fails_the_job_and_success_resets_count(tmp_path):
    c, rec = make(tmp_path, tolerable_failures=1)
    c.receive_decline(c.trigger(0.0), (0, 0), "x", 0.0)
    assert c.job_failure is None
    ack_all(c, c.trigger(0.1), 0.1)           # success resets the consecutive count
    c.receive_decline(c.trigger(0.2), (0, 0), "x", 0.2)
    assert c.job_failure is None
    c.receive_decline(c.trigger(0.3), (0, 0), "y", 0.3)
    assert "tolerable number of failed checkpoints (1)" in c.job_failure


def test_retention_keeps_only_the_newest_and_deletes_subsumed_files(tmp_path):
    c, rec = make(tmp_path, retained=2)
    locations = []
    for i in range(5):
        chk = c.trigger(float(i))
        locations.append(c.pending[chk].location)
        ack_all(c, chk, float(i) + 0.1)
    assert [x.checkpoint_id for x in c.completed] == [4, 5]
    c.cleaner.close()  # deletions run in the background: wait for them
    assert [os.path.exists(loc) for loc in locations] == [False, False, False, True, True]
    assert sorted(os.listdir(c.job_dir)) == ["chk-4", "chk-5"]


def test_completion_subsumes_older_pending_checkpoints(tmp_path):
    c, rec = make(tmp_path, max_concurrent=2)
    first, second = c.trigger(0.0), c.trigger(0.1)
    ack_all(c, second, 0.2)
    assert first not in c.pending and rec.aborts == [first]


def test_no_periodic_checkpoint_starts_while_a_savepoint_waits(tmp_path):
    c, rec = make(tmp_path)
    assert c.maybe_trigger_periodic(0.0) == 1
    assert c.savepoint_blocked_by() == [1]
    c.queued_savepoints = {"request-1"}   # the control plane queued a savepoint meanwhile
    ack_all(c, 1, 0.05)
    assert c.savepoint_blocked_by() == []
    assert c.maybe_trigger_periodic(0.2) is None and rec.triggers == [1]
    c.queued_savepoints = set()
    assert c.maybe_trigger_periodic(0.3) == 2


def test_checkpoints_slower_than_the_interval_do_not_starve_the_final_checkpoint(tmp_path):
    c, rec = make(tmp_path)
    assert c.maybe_trigger_periodic(0.0) == 1
    assert c.maybe_trigger_final(0.05, inputs_ended=True) is None   # 1 is pending
    ack_all(c, 1, 0.5)                                               # took 5 intervals
    assert c.maybe_trigger_periodic(0.5) is None, "the final checkpoint is due"
    assert c.maybe_trigger_final(0.5, inputs_ended=True) == 2
