"""The runtime: what runs in a slot process.

Three packages by role, each importing only the ones below it (``tests/unit/architecture/test_layers.py``):

* :mod:`.host` -- process hosting: the slot process (:mod:`.host.slot`), the local runner's
  fork server, the authenticated connections and the channels between subtasks;
* :mod:`.task` -- the task loop and its checkpointing, barrier alignment, mailbox and flow
  control, and what a task gets from its slot (:mod:`.task.environment`);
* :mod:`.operators` -- the operators, declared in one registry
  (:mod:`.operators.registry`: spec type, state layout, restore compatibility).

What all three share stays here: :mod:`.batches`, the record batches of the data path.

Every other module lived directly in this package before issue 53: their old paths
(``runtime.slot``, ``runtime.windowing``, ``runtime.mailbox``,
``runtime.vectorized_ops.latest``, ...) still import, as the same module objects, with a
:class:`DeprecationWarning` naming the new path (:func:`~..extras.alias_moved_modules`).
"""

from __future__ import annotations

from ..extras import alias_moved_modules

#: old module name (in this package) -> its module now (relative to this package)
MOVED = {
    "edge_operators": "operators.edges",
    "timers": "operators.timers",
    "watermarks": "operators.watermarks",
    "changelog_agg": "operators.changelog_agg",
    "windowing": "operators.windowing",
    "sessions": "operators.sessions",
    "topn": "operators.topn",
    "distinct": "operators.distinct",
    "broadcast": "operators.broadcast",
    "upsert_materializer": "operators.upsert_materializer",
    "factory": "operators.registry",
    "joins": "operators.joins.per_record",
    "join_state": "operators.joins.state",
    "regular_join": "operators.joins.regular",
    "temporal_join": "operators.joins.temporal",
    "vector_joins": "operators.joins.vectorized",
    "vectorized_ops": "operators.vectorized",
    "task_checkpoint": "task.checkpointing",
    "alignment": "task.alignment",
    "mailbox": "task.mailbox",
    "debloat": "task.debloat",
    "environment": "task.environment",
    "failure_place": "task.failure_place",
    "slot": "host.slot",
    "forkserver": "host.forkserver",
    "auth": "host.auth",
    "channels": "host.channels",
}


alias_moved_modules(__name__, MOVED)
