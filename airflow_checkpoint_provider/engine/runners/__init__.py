"""The runners: where a job's slots run, and the job master every runner shares.

* :mod:`.local`: one OS process per slot on this machine;
* :mod:`.spark`: the slots as the tasks of one Spark barrier stage;
* :mod:`.jobmaster`: the job master and its collaborators (attempts, failover, restore plan,
  promotion, standby, fencing, control plane, metrics, progress), which never know the runner.

A runner is chosen by name (``engine.execution``). The modules that moved into
:mod:`.jobmaster` and :mod:`.spark` (issue 53) still import from their old paths, as the
same module objects, with a ``DeprecationWarning`` naming the new one.
"""

from __future__ import annotations

from ..extras import alias_moved_modules

#: old module -> its path now, relative to this package
_MOVED = {
    "attempt": "jobmaster.attempt",
    "control": "jobmaster.control_plane",
    "failures": "jobmaster.failover",
    "fencing": "jobmaster.fencing",
    "metrics": "jobmaster.metrics",
    "progress": "jobmaster.progress",
    "promote": "jobmaster.promote",
    "restore_plan": "jobmaster.restore_plan",
    "standby": "jobmaster.standby",
    "spark_launcher": "spark.launcher",
    "pyspark_daemon": "spark.daemon",
}
alias_moved_modules(__name__, _MOVED)
