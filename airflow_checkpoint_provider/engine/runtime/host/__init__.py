"""Process hosting: what starts, connects and runs the tasks of a slot.

* :mod:`.slot` -- a slot: one process (local runner) or one Spark barrier task that hosts
  subtask ``i`` of every vertex; its start-up protocol with the coordinator, its data
  server and readers, its watchdog;
* :mod:`.forkserver` -- the local runner's fork server, which imports the slot runtime once
  and forks a slot per request;
* :mod:`.auth` -- the per-job secret proven in both directions on every runtime connection;
* :mod:`.channels` -- the channels to downstream subtasks (TCP or in-process) and the
  record writer that partitions a task's output over them.

This package sits above :mod:`..task` (the slot builds each task's
:class:`~..task.environment.TaskEnvironment` and runs its loop) and is imported by the
runners only.
"""
