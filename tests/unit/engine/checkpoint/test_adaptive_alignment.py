"""The adaptive aligned timeout (``CheckpointConfig(unaligned=True, aligned_timeout_ms=...)``)
and its metrics, on the coordinator with a fake clock: a checkpoint that aligns for longer
than the timeout turns unaligned; after a run of such switches the next checkpoints start
unaligned at once, then one probes aligned again."""

import pytest

from airflow_checkpoint_provider.engine import CheckpointConfig
from airflow_checkpoint_provider.engine.checkpoint import coordinator as coordinator_module
from airflow_checkpoint_provider.engine.checkpoint.coordinator import CheckpointCoordinator
from airflow_checkpoint_provider.engine.checkpoint.outcomes import TaskAck
from airflow_checkpoint_provider.engine.runners.jobmaster.metrics import JobMetrics

TASKS = [(0, 0), (1, 0)]


def _coordinator(tmp_path, triggers, unaligns):
    c = CheckpointCoordinator(
        job_id="job1",
        job_name="j",
        job_dir=str(tmp_path / "j" / "job1"),
        config=CheckpointConfig(
            interval_ms=100, initial_delay_ms=0, unaligned=True, aligned_timeout_ms=100
        ),
        tasks=TASKS,
        operator_info={},
        send_trigger=lambda chk, ts, kind, loc, unaligned: triggers.append((chk, unaligned)),
        send_notify=lambda chk: None,
        send_abort=lambda chk: None,
        send_unalign=unaligns.append,
        now=0.0,
    )
    c.set_tasks_running(set(TASKS))
    return c


def _complete(c, chk, now, inflight=0):
    done = None
    for t in TASKS:
        done = c.receive_ack(
            chk,
            t,
            TaskAck.from_wire(metrics={"alignment_ms": 150.0, "inflight_bytes": inflight}),
            now,
        )
    return done


def test_slow_alignments_switch_then_start_unaligned_then_probe_aligned(tmp_path):
    triggers, unaligns = [], []
    c = _coordinator(tmp_path, triggers, unaligns)
    metrics = JobMetrics(job_name="j", job_id="job1")
    c.listeners.append(metrics.checkpoint_listener)
    now, alignments = 0.0, []
    n = coordinator_module.SWITCHES_BEFORE_UNALIGNED_START + coordinator_module.UNALIGNED_STARTS
    for _ in range(n + 1):
        chk = c.trigger(now)
        c.check_timeouts(now + 0.05)
        c.check_timeouts(now + 0.15)  # still aligning after the 100 ms timeout
        done = _complete(c, chk, now + 0.3, inflight=1000)
        alignments.append((done.alignment, done.switched_after_ms))
        now += 1.0
    switches = coordinator_module.SWITCHES_BEFORE_UNALIGNED_START
    assert alignments[:switches] == [("switched", 150)] * switches
    assert alignments[switches:n] == [("unaligned", None)] * coordinator_module.UNALIGNED_STARTS
    assert alignments[n] == ("switched", 150), "then one starts aligned again"
    assert [u for _, u in triggers] == [False] * switches + [True] * (n - switches) + [False]
    assert unaligns == [1, 2, 3, n + 1]
    text = metrics.exposition().decode()
    assert 'ckpt_checkpoints_switched_unaligned_total{job_id="job1",job_name="j"} 4.0' in text
    assert 'ckpt_checkpoints_unaligned_total{job_id="job1",job_name="j"} 9.0' in text
    assert 'ckpt_last_checkpoint_inflight_bytes{job_id="job1",job_name="j"} 2000.0' in text
    assert 'ckpt_last_checkpoint_alignment_ms{job_id="job1",job_name="j"} 150.0' in text
    c.cleaner.close()  # its subsumed checkpoints are deleted in the background: wait


def test_a_checkpoint_that_aligns_in_time_resets_the_run_of_switches(tmp_path):
    triggers, unaligns = [], []
    c = _coordinator(tmp_path, triggers, unaligns)
    now = 0.0
    for slow in (True, True, False, True, True):
        chk = c.trigger(now)
        c.check_timeouts(now + (0.15 if slow else 0.05))
        _complete(c, chk, now + 0.2)
        now += 1.0
    c.trigger(now)
    assert triggers[-1] == (6, False), "two switches since the aligned one: still aligned"
    c.cleaner.close()


@pytest.mark.parametrize("alignment", ["aligned", "unaligned"])
def test_no_timeout_no_adaptation(tmp_path, alignment):
    triggers = []
    c = CheckpointCoordinator(
        job_id="job1",
        job_name="j",
        job_dir=str(tmp_path / "j" / "job1"),
        config=CheckpointConfig(interval_ms=100, unaligned=alignment == "unaligned"),
        tasks=TASKS,
        operator_info={},
        send_trigger=lambda chk, ts, kind, loc, unaligned: triggers.append(unaligned),
        send_notify=lambda chk: None,
        send_abort=lambda chk: None,
        now=0.0,
    )
    c.set_tasks_running(set(TASKS))
    c.trigger(0.0)
    c.check_timeouts(10.0 - 0.001)
    assert _complete(c, 1, 10.0).alignment == alignment
    assert triggers == [alignment == "unaligned"]
    c.cleaner.close()
