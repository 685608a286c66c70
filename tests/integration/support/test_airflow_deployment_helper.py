"""The real-deployment helper answers a human-in-the-loop task only once the scheduler read
the executor event of the worker that parked it (tests/support/airflow_deployment.py, ``respond``).

Lines from a real scheduler log (Airflow 3.3.2, LocalExecutor): the Approve was sent 0.26 s
after the park; the resumed task was QUEUED when the scheduler read the parking worker's
"success" event, and it marked the task FAILED (task-state-changed-externally)."""

from __future__ import annotations

import pytest
from airflow_deployment import executor_event_seen

RUN = "manual__2026-11-26T23:31:20.444313+00:00"
LOG = f"""\
2026-11-26T23:35:17.757165Z [info     ] Workload finished              [supervisor] duration=3.87 exit_code=0 final_state=awaiting_input
2026-11-26T23:35:18.878614Z [info     ] Trying to enqueue tasks: [<TaskInstance: blue_green_upgrade.approve {RUN} [scheduled]>] for executor: LocalExecutor(parallelism=8)
2026-11-26T23:35:19.020000Z [info     ] Received executor event with state success for task instance TaskInstanceKey(dag_id='blue_green_upgrade', task_id='approve', run_id='{RUN}', try_number=1, map_index=-1) [airflow.jobs.scheduler_job_runner.SchedulerJobRunner]
2026-11-26T23:35:19.058793Z [error    ] Executor LocalExecutor(parallelism=8) reported that the task instance <TaskInstance: blue_green_upgrade.approve {RUN} [queued]> finished with state success, but the task instance's state attribute is queued.
"""


def test_the_parking_workers_executor_event_is_found_for_its_task_instance_try_only():
    assert executor_event_seen(LOG, "blue_green_upgrade", RUN, "approve", 1)
    assert not executor_event_seen(LOG, "blue_green_upgrade", RUN, "approve", 2)
    assert not executor_event_seen(LOG, "blue_green_upgrade", RUN, "stop_blue", 1)
    assert not executor_event_seen(LOG, "blue_green_upgrade", RUN[:-1] + "4", "approve", 1)
    # before the worker exited (only the park itself logged): not settled yet
    assert not executor_event_seen(LOG.splitlines()[0], "blue_green_upgrade", RUN, "approve", 1)


@pytest.mark.timeout(300)  # one `import airflow` process: ~3 CPU-s
def test_the_scheduler_of_a_deployment_starts_with_the_dag_files_imports_preloaded(
        tmp_path, monkeypatch):
    """With ``preload_dag_imports`` Airflow's own start-up (``import airflow``) imports, in
    the scheduler only, the modules the DAG files import: the LocalExecutor forks its workers
    and they fork the task processes after that, so a task's DAG parse imports nothing."""
    import runpy
    import subprocess
    import sys

    from airflow_deployment import PRELOAD, AirflowDeployment

    dep = AirflowDeployment(str(tmp_path / "home"), f"sqlite:///{tmp_path}/airflow.db",
                            preload_dag_imports=True)
    code = ("import sys; sys.argv = ['airflow', 'scheduler']; import airflow; "
            "print(sorted(m for m in ('airflow_checkpoint_provider.operators.submit', "
            "'airflow_checkpoint_provider.engine', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=dep.env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == ("['airflow_checkpoint_provider.engine', "
                                  "'airflow_checkpoint_provider.operators.submit', 'pyarrow']")
    assert "airflow_local_settings: preloaded" in out.stderr, out.stderr[-3000:]
    # the other processes (api-server, triggerer, CLI commands) fork no DAG parser
    monkeypatch.setattr(sys, "argv", ["airflow", "api-server"])
    assert runpy.run_path(PRELOAD)["PRELOADED"] == []
