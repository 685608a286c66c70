"""The pyspark daemon of the Spark runner's executors (``spark.python.daemon.module``,
set by :func:`.session.session_for` when the executors run the driver's interpreter).

It is pyspark's own daemon, started after the slot runtime is imported: the Python worker it
forks for each of a job's barrier tasks inherits the modules instead of importing them
again, as the local runner's slots inherit them from its fork server. Measured on a local[4]
job with failures: 24.4 -> 20.7 CPU-s for the whole test.
"""

from __future__ import annotations

import os
import sys


def prefer_installed_pyspark(path: list[str] | None = None) -> list[str]:
    """Take pyspark's own ``python/lib/*.zip`` off ``path`` (``sys.path``) when they belong
    to the pyspark package installed on it; the names taken off.

    Spark puts ``pyspark.zip`` and py4j's zip first on the PYTHONPATH of every Python worker
    and of a driver started by spark-submit. The zips hold sources only, so each such process
    compiled every pyspark module it imported (0.6-0.9 CPU-s more per process here), while
    the installed package, the same files, has its bytecode. A zip of another Spark (its
    own ``SPARK_HOME``), or one whose package is not installed beside, stays."""
    path = sys.path if path is None else path
    if "pyspark" in sys.modules and path is sys.path:
        return []  # imported already: keep what it was imported from
    installed = next((p for p in path if p and not p.endswith(".zip")
                      and os.path.isdir(os.path.join(p, "pyspark"))), None)
    if installed is None:
        return []
    lib = os.path.join(installed, "pyspark", "python", "lib")
    drop = [p for p in path if p.endswith(".zip") and os.path.dirname(p) == lib
            and os.path.isdir(os.path.join(installed, os.path.basename(p).split("-")[0]
                                           .removesuffix(".zip")))]
    path[:] = [p for p in path if p not in drop]
    return drop


def main() -> None:
    prefer_installed_pyspark()
    from pyspark import daemon

    from ...runtime.host.forkserver import PRELOAD, prepare_to_fork

    prepare_to_fork(PRELOAD)
    daemon.manager()


if __name__ == "__main__":
    main()
