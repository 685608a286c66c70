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

import sys


def main(argv: list[str] | None = None) -> None:
    from airflow_checkpoint_provider.engine.cli import main as cli

    args = list(sys.argv[1:] if argv is None else argv)
    if "--runner" not in args:
        args = ["--runner", "spark", *args]
    cli(["run", *args])


if __name__ == "__main__":
    main()
