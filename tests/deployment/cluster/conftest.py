"""One real deployment for every test of tests/deployment/cluster that needs Airflow (one Airflow start,
~1-2 min on this machine, instead of one per module): see deploy_support.py."""

from __future__ import annotations

import os
import time

import pytest
from deploy_support import SPARK_DEFAULTS, Deployment, cancel_active_jobs, phase

from airflow_checkpoint_provider.engine.catalog import upgrade_database


@pytest.fixture(scope="package")
def deployment(request, tmp_path_factory, postgres_server):
    """Airflow's ``db migrate`` and the ckpt schema run while the session's Spark cluster
    starts (both take CPU-bound tens of seconds on a loaded machine)."""
    from airflow_deployment import AirflowDeployment

    phase("PostgreSQL server (session fixture) up")
    work = str(tmp_path_factory.mktemp("deployment"))
    metadata_url = postgres_server.create_database()
    conf_dir = os.path.join(work, "spark-conf")
    os.makedirs(conf_dir)
    jobs_dir = os.path.join(work, "jobs")
    # the example's PostgreSQL sinks: a run's conf names the connection (sink_conn_id), never
    # a URL; the tests that use it create their tables in this database
    example_pg_url = postgres_server.create_database().replace("postgresql+psycopg://",
                                                                "postgresql://", 1)
    env = {
        "AIRFLOW_CONN_EXAMPLE_PG": example_pg_url,
        "SPARK_CONF_DIR": conf_dir, "SPARK_LOCAL_IP": "127.0.0.1",
        "CKPT_EXAMPLE_DIR": jobs_dir, "CKPT_EXAMPLE_RATE": "50",
        # the pre-flight check reads the latest checkpoint of a running job: it must outlive
        # the check (3 retained checkpoints)
        "CKPT_EXAMPLE_INTERVAL_MS": "2000",
        # executor JVMs registered more than 60 s after the application started at load 37
        "CKPT_SPARK_SLOT_WAIT_S": "300",
        # scheduled_savepoints on Feb 29 only: its next scheduled run is in 2028. Hourly, its
        # unpause created a run for the past hour, on the default job name, that failed its
        # three tries (no such job) while the test's own run waited behind it
        # (max_active_runs=1): ~60 s and six task starts
        "CKPT_SAVEPOINT_CRON": "0 0 29 2 *",
        "AIRFLOW_CONN_CHECKPOINT_METADATA_DEFAULT":
            f'{{"conn_type": "checkpoint_metadata", "extra": {{"url": "{metadata_url}"}}}}',
    }
    airflow = AirflowDeployment(os.path.join(work, "airflow"), postgres_server.create_database(),
                                env=env, preload_dag_imports=True)
    airflow.begin_migrate()
    try:
        upgrade_database(metadata_url)  # `ckpt db upgrade`: the hook never creates the schema
        spark_cluster = request.getfixturevalue("spark_cluster")
    except BaseException:
        airflow.stop()
        raise
    phase("Spark cluster (session fixture) up, ckpt schema created")
    host, port = spark_cluster.url.rsplit(":", 1)
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = (
        f'{{"conn_type": "spark", "host": "{host}", "port": {port}}}')
    airflow.env["AIRFLOW_CONN_SPARK_DEFAULT"] = env["AIRFLOW_CONN_SPARK_DEFAULT"]
    dep = Deployment(airflow, metadata_url, jobs_dir, env, conf_dir, spark_cluster)
    dep.example_pg_url = example_pg_url
    dep.write_spark_defaults(SPARK_DEFAULTS)
    try:
        airflow.start()
        phase("airflow db migrate + 4 processes, api-server healthy")
        for dag_id in ("savepoint_upgrade_restore", "blue_green_upgrade"):
            airflow.wait_for_dag(dag_id)
        # scheduled (if ever, see CKPT_SAVEPOINT_CRON): unpaused by its test only
        airflow.wait_for_dag("scheduled_savepoints", unpause=False)
        phase("DAGs serialized")
        deadline = time.monotonic() + 120  # the scheduler logs its preload when it starts
        while not airflow.preloaded_modules():
            airflow.check_alive()
            assert time.monotonic() < deadline, f"no preload in {airflow.log_path('scheduler')}"
            time.sleep(1)
        yield dep
    finally:
        try:
            cancel_active_jobs(dep.store)
        finally:
            airflow.stop()
            dep.store.close()
            parse_ms = airflow.task_parse_ms()
            print(f"\nreal deployment: DAG durations (s) {dep.durations}; "
                  f"{len(airflow.deferrals())} deferrals ran in the triggerer; "
                  f"{len(parse_ms)} task process starts, DAG parse "
                  f"{sum(parse_ms) / max(len(parse_ms), 1):.0f} ms on average")
