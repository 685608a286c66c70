"""The task's typed vocabulary (issue 53 item 2): mailbox items are ItemKind-tagged channel
tuples or control dataclasses, dispatched with ``match``; the checkpointing is a collaborator
the task hands the control messages to."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_checkpoint_provider.engine.protocol import BarrierKind, CheckpointBarrier
from airflow_checkpoint_provider.engine.protocol import frames as P
from airflow_checkpoint_provider.engine.runtime.host.channels import event_item
from airflow_checkpoint_provider.engine.runtime.task.mailbox import (
    AbortCheckpoint,
    Finish,
    ItemKind,
    Mailbox,
    NotifyComplete,
    TriggerCheckpoint,
    Unalign,
)
from airflow_checkpoint_provider.engine.runtime.task.stream_task import StreamTask


def test_an_event_frame_becomes_a_channel_item_of_its_kind():
    barrier = CheckpointBarrier(3, 0, BarrierKind.CHECKPOINT, "/tmp/chk-3")
    kind, channel, decoded = event_item(P.BARRIER, barrier.encode(), 2)
    assert (kind, channel, decoded.checkpoint_id) == (ItemKind.BARRIER, 2, 3)
    assert event_item(P.END_OF_INPUT, b"", 1) == (ItemKind.END_OF_INPUT, 1, None)


def test_control_items_go_before_data_and_compare_by_value():
    m = Mailbox(4)
    m.put_data((ItemKind.RECORDS, 0, [{"a": 1}]))
    m.put_control(NotifyComplete(7))
    assert m.take(0) == NotifyComplete(7)
    assert m.take(0) == (ItemKind.RECORDS, 0, [{"a": 1}])


class _Checkpointing:
    def __init__(self) -> None:
        self.calls: list = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))


def _task():
    task = SimpleNamespace(checkpointing=_Checkpointing(), finished=False, exhausted=False,
                           suspended_for=None, ended=[])
    task._end_input = lambda start: task.ended.append(start)
    return task


def test_each_control_item_reaches_the_checkpointing_collaborator():
    task = _task()
    for item in (NotifyComplete(1), Unalign(2), AbortCheckpoint(3)):
        StreamTask._control(task, item)  # type: ignore[arg-type]
    assert task.checkpointing.calls == [("notify_complete", 1), ("unalign", 2), ("abort", 3)]
    StreamTask._control(task, Finish())  # type: ignore[arg-type]
    assert task.finished


def test_a_stop_savepoint_suspends_the_source_and_its_abort_resumes_it():
    task = _task()
    stop = CheckpointBarrier(5, 0, BarrierKind.SAVEPOINT_STOP, "/tmp/sp-5")
    StreamTask._control(task, TriggerCheckpoint(stop))  # type: ignore[arg-type]
    assert task.suspended_for == 5 and task.checkpointing.calls == [("trigger", stop)]
    StreamTask._control(task, AbortCheckpoint(5))  # type: ignore[arg-type]
    assert task.suspended_for is None


def test_an_unknown_control_item_is_a_bug_not_ignored():
    with pytest.raises(AssertionError):
        StreamTask._control(_task(), ("finish",))  # type: ignore[arg-type]
