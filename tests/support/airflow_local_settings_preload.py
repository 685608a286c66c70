"""``airflow_local_settings`` of the test deployments (tests/support/airflow_deployment.py copies it
to ``$AIRFLOW_HOME/config/airflow_local_settings.py``; Airflow imports that module when it
starts, in every process).

In the scheduler and the dag-processor, it imports the modules the DAG files of
``[core] dags_folder`` import
(their top-level imports, as the dag-processor's ``parsing_pre_import_modules`` does before
it forks a parser). The LocalExecutor forks its workers from the scheduler, and each task
process is forked from a worker, so every task starts with Airflow's task SDK, this
provider and the engine (numpy, pyarrow, SQLAlchemy) already imported: the task's own DAG
file parse only builds the DAG. Without it each task process imported them again: ~0.7
CPU-s and, at load 30-40 on 2 cores, 3-4 s of wall per task start (``dag_file_parse_ms``
of "Worker startup parse complete"), ~100 task starts per run of tests/deployment/cluster. The
dag-processor forks one parser per DAG file likewise (its own pre-import covers only
``airflow.*`` modules).

Best effort: a module that fails to import is left to the task, which then fails with its
own error as it would without this file. Other processes (api-server, triggerer, CLI
commands) import nothing here.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys
import time

__all__: list[str] = []  # no cluster policy: Airflow copies every public name of this module

PRELOADED: list[str] = []


def _dag_file_imports(dags_folder: str) -> list[str]:
    modules: set[str] = set()
    for name in sorted(os.listdir(dags_folder)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(dags_folder, name)) as f:
            tree = ast.parse(f.read(), name)
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules.add(node.module)
            elif isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
    return sorted(modules - {"__future__"})


def _preload() -> None:
    from airflow.configuration import conf

    started = time.process_time()
    for module in _dag_file_imports(conf.get("core", "dags_folder")):
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 -- the task reports it, as without the preload
            continue
        PRELOADED.append(module)
    print(
        f"airflow_local_settings: preloaded {len(PRELOADED)} modules the DAG files import "
        f"in {time.process_time() - started:.2f} CPU-s",
        file=sys.stderr,
        flush=True,
    )


#: the processes that fork children which parse DAG files: the scheduler (its LocalExecutor's
#: task processes) and the dag-processor (one parser process per file)
PRELOADING = ("scheduler", "dag-processor")

if sys.argv[1:2] and sys.argv[1] in PRELOADING:
    _preload()
