"""A task: the loop that runs a chain of operators in a slot, and its checkpointing.

* :mod:`.stream_task` -- :class:`~.stream_task.StreamTask`: lifecycle, input loops
  (mailbox dispatch), data and event-time paths;
* :mod:`.checkpointing` -- :class:`~.checkpointing.SubtaskCheckpointCoordinator`, the
  collaborator a task holds as ``task.checkpointing``: barrier actions, snapshot, upload
  and ack;
* :mod:`.alignment` -- the barrier handler (aligned, at-least-once and unaligned);
* flow control: :mod:`.mailbox` (a task's input queue, unaligned capture) and
  :mod:`.debloat` (credit and buffer debloating);
* :mod:`.outputs` -- what the task writes to, as protocols;
* :mod:`.environment` -- what every task of a slot shares (the slot builds it), and
  :mod:`.failure_place` -- where in a task an exception was raised.

The slot that hosts the tasks is :mod:`..host`, above this package: a task knows its slot
only through its :class:`~.environment.TaskEnvironment` and the protocols of :mod:`.outputs`.

Before issue 53 this path was a module (now :mod:`.stream_task`): its names still read from
here, with a :class:`DeprecationWarning`.
"""

from __future__ import annotations

import importlib
import warnings

#: a name of the old ``runtime.task`` module -> the module that has it now
_MOVED_NAMES = {
    "StreamTask": "runtime.task.stream_task",
    "open_operator": "runtime.operators.registry",
    "TaskEnvironment": "runtime.task.environment",
    "LocalChannel": "runtime.host.channels",
    "OutputChannel": "runtime.host.channels",
    "RecordWriter": "runtime.host.channels",
    "event_item": "runtime.host.channels",
}


def __getattr__(name: str) -> object:
    if name not in _MOVED_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    engine = __name__.rsplit(".", 2)[0]
    module = importlib.import_module(f"{engine}.{_MOVED_NAMES[name]}")
    warnings.warn(f"{__name__}.{name} is deprecated: import {name} from {module.__name__}",
                  DeprecationWarning, stacklevel=2)
    value = getattr(module, name)
    globals()[name] = value  # one warning per name
    return value
