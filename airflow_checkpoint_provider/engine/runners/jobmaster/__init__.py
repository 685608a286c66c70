"""The job master and its collaborators, the same for every runner.

* :mod:`.master`: :class:`JobMaster` runs a job: the coordinator's TCP server, the job row
  and its heartbeat, the attempts; a runner gives it a launcher that starts one attempt's
  slots;
* :mod:`.attempt`: one attempt, message by message; :mod:`.failover`: the attempts under the
  restart strategy and the checkpoint each restart restores;
* :mod:`.restore_plan`: the snapshot a job starts from and whether every part can go back to
  it; :mod:`.promote`: restore in place (``PROMOTE``); :mod:`.standby`: a standby's wait
  for its handover; :mod:`.fencing`: sinks that hold their commits;
* :mod:`.control_plane`: the control requests Airflow and the CLI put in the metadata DB;
* :mod:`.metrics` (Prometheus) and :mod:`.progress` (the ``ckpt run`` progress line): what
  a running job shows.

``from ...runners.jobmaster import JobMaster`` (the module this package was) loads
:mod:`.master` when first asked: :mod:`.fencing`'s users (the client, the CLI) load no job
master.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .master import CoordinatorServer, JobMaster


def __getattr__(name: str):
    if name in ("JobMaster", "CoordinatorServer"):
        from . import master

        return getattr(master, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CoordinatorServer", "JobMaster"]
