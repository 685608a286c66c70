"""The Spark runner: a job's slots are the tasks of one Spark barrier stage.

* :mod:`.runner`: :class:`SparkRunner`, what ``Pipeline.run(runner="spark")`` builds;
* :mod:`.session`: the job's ``SparkSession`` (:func:`session_for`; the master is checked
  before Spark is asked);
* :mod:`.launcher`: one attempt's slots as a barrier stage, ended so that its cores are free;
* :mod:`.daemon`: the executors' pyspark daemon, which imports the slot runtime once.

The names of the module this package was (``runners.spark``) import from here as before,
when first asked for: an executor that imports :mod:`.launcher` or :mod:`.daemon` loads
no job master.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .launcher import SparkBarrierLauncher
    from .runner import SLOT_WAIT_ENV, SparkRunner
    from .session import configured_master, session_for


def __getattr__(name: str):
    if name in ("SparkRunner", "SLOT_WAIT_ENV"):
        from . import runner

        return getattr(runner, name)
    if name == "SparkBarrierLauncher":
        from . import launcher

        return launcher.SparkBarrierLauncher
    if name in ("configured_master", "session_for"):
        from . import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SLOT_WAIT_ENV", "SparkBarrierLauncher", "SparkRunner", "configured_master",
           "session_for"]
