"""Entry point for spark-submit (and anything that starts a job as a program).

    spark-submit --master spark://host:7077 \\
        $(python -c 'import airflow_checkpoint_provider.engine.launch as m; print(m.__file__)') \\
        PIPELINE [--job-name NAME] [--checkpoint-dir DIR] [--db URL] [--restore latest|PATH] \\
        [--restart fixed:3:1000] [--interval-ms 1000] [--savepoint-dir DIR] [--coordinator-port P]
        [--trust-snapshot]

or ``python -m airflow_checkpoint_provider.engine.launch PIPELINE ... [--master URL]``.
The arguments are those of ``ckpt run``; the runner is always ``spark`` and the master is
the one spark-submit configured unless ``--master`` is given.
"""

from __future__ import annotations

import os
import sys


def env_from_spark_conf(items: list[tuple[str, str]], environ: dict | None = None) -> list[str]:
    """Set ``NAME`` in the environment for every Spark property ``spark.ckpt.env.NAME``
    (how the submit hook passes a standalone cluster-mode driver its environment, never on
    the command line: the metadata DB URL holds a password). Variables already set win.
    Returns the names set."""
    from airflow_checkpoint_provider.engine.fs.private import SPARK_ENV_PREFIX

    environ = os.environ if environ is None else environ
    done = []
    for key, value in items:
        if key.startswith(SPARK_ENV_PREFIX):
            name = key[len(SPARK_ENV_PREFIX):]
            if name and name not in environ:
                environ[name] = value
                done.append(name)
    return done


def _spark_conf_items() -> list[tuple[str, str]]:
    """The driver JVM's Spark properties, when this process was started by spark-submit."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return []
    from pyspark import SparkConf, SparkContext

    # connect to spark-submit's JVM first: a SparkConf made before that is an empty Python
    # dict (it never saw the submitted properties, spark.ckpt.env.* included)
    SparkContext._ensure_initialized()
    return list(SparkConf().getAll())


def main(argv: list[str] | None = None) -> None:
    from airflow_checkpoint_provider.engine.runners.spark.daemon import (
        prefer_installed_pyspark,
    )

    prefer_installed_pyspark()  # before pyspark is imported: its bytecode, not the zip's
    from airflow_checkpoint_provider.engine.cli import main as cli

    args = list(sys.argv[1:] if argv is None else argv)
    env_from_spark_conf(_spark_conf_items())
    if "--runner" not in args:
        args = ["--runner", "spark", *args]
    cli(["run", *args])


if __name__ == "__main__":
    main()
