"""Upgrade a running job with a standby: the new version is up before the old one stops.

pre-flight: v2 must restore a fresh savepoint of v1 (``ckpt verify-restore``), else the run
fails before v1 is touched -> start v2 as a standby of v1 (``restore="standby:JOB"``): its
application comes up and waits; the task returns once v2 says ``READY`` in the metadata DB
-> stop v1 with a savepoint: v2 restores it at once (no application start in the output
gap) -> wait for v2's first completed checkpoint after the restore. A failed stop withdraws
the waiting standby and v1 keeps running; if v2 fails after the hand-over it is cancelled,
what it committed is removed from its sinks (``guard_rollback``) and v1 restarts from the
same savepoint (the run then ends failed), as in ``savepoint_upgrade_restore``.

Savepoint mode only: ``savepoint_upgrade_restore`` offers the last-state modes (their age
limit and fallbacks are decided after v1 ended, too late for a standby that restores at
once). Trigger with a conf such as ``{"job_name": "versioned-sum", "v2_pipeline": "..."}``;
what a run may choose is fixed here as in ``savepoint_upgrade_restore``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_checkpoint_provider.params import (
    EXAMPLE_DAGS,
    EXAMPLE_ENV,
    EXAMPLE_SINK_CONNECTIONS,
    example_savepoint_roots,
)
from airflow_checkpoint_provider.workflows import ConnectionChoice, savepoint_upgrade

EXAMPLE = "airflow_checkpoint_provider.examples.versioned_sum"
# A DAG run's conf is untrusted: the pipelines (v1 and v2) it may choose, kept by the DAG author
PIPELINES = tuple(f"{EXAMPLE}:{f}" for f in (
    "build_v1", "build_v2", "build_v2_broken", "build_v2_incompatible", "build_v2_slow",
    "build_v2_flaky"))
SINKS = ConnectionChoice("CKPT_EXAMPLE_PG_URL", EXAMPLE_SINK_CONNECTIONS, param="sink_conn_id",
                         optional=True)

with DAG(
    dag_id="savepoint_upgrade_standby",
    description="start v2 as a standby, stop v1 with a savepoint, v2 restores it at once; "
                "roll back to v1 on failure",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    doc_md=__doc__,
    tags=["checkpoint", "upgrade"],
    render_template_as_native_obj=True,
) as dag:
    savepoint_upgrade(
        pipelines=PIPELINES, old=f"{EXAMPLE}:build_v1", new=f"{EXAMPLE}:build_v2",
        job_name="versioned-sum", any_job_name=True, job_env=EXAMPLE_ENV, connections=[SINKS],
        savepoint_roots=example_savepoint_roots, allowed_owner_dags=EXAMPLE_DAGS,
        standby=True, first_checkpoint_timeout_s=300)
