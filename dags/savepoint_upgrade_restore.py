"""Upgrade a running job, with a pre-flight restore check and a rollback.

pre-flight: v2 must restore a fresh savepoint of v1 (v1 keeps running; if v1 cannot take one,
its latest checkpoint) (``ckpt verify-restore``: uids, state kinds and serializers, each
operator opened on a sample of its state), else the run fails naming the operator and
state, before v1 is stopped -> stop v1 in the chosen upgrade mode
(``savepoint``: stop with a savepoint; ``last-state``: cancel, hand over the latest
completed checkpoint unless older than ``max_checkpoint_age_s``;
``savepoint-or-last-state``: a savepoint, or last-state when v1 is unhealthy or the
savepoint fails) -> start v2 restoring from it -> wait for v2's first completed checkpoint
after the restore. If v2 does not start or does not checkpoint in time, cancel v2 (if it
runs), remove what v2 committed from its sinks (``guard_rollback``; refused, naming the
sinks, when a sink cannot: then v1 is not restarted; with ``rollback_decision`` a person
decides in a HITL step, ``decide_rollback``, whether to restart it anyway) and restart v1
from the same snapshot; the run then ends failed (task ``upgraded`` is upstream_failed) so
the failed upgrade is visible, with v1 running again.

Trigger with a conf such as ``{"job_name": "orders", "v2_pipeline": "jobs.orders:build_v2"}``.

The workflow is :func:`airflow_checkpoint_provider.workflows.savepoint_upgrade`; this file
fixes its arguments (a DAG of your own calls it the same way with your pipelines). A run's
conf chooses among what this file fixes: pipelines (``PIPELINES``), the job name (any name:
the example family's jobs, ``allowed_owner_dags``),
modes, bounded numbers, the pipelines' options within ``JOB_ENV``'s bounds, and a savepoint
directory under ``SAVEPOINT_ROOTS`` (the example's ``$CKPT_EXAMPLE_DIR/savepoints`` and the
deployment's ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``, read in the worker; empty: the job's own).
Task ``check_conf`` checks it all again in the worker, symlinks resolved, before v1 is
touched. No URL and no job directory: ``$CKPT_EXAMPLE_DIR`` and ``$CKPT_EXAMPLE_PG_URL`` are
the worker's environment, the same for every task of the run.
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
# A DAG run's conf is untrusted: the pipelines (v1 and v2) and environment variables it may
# choose, kept by the DAG author
PIPELINES = tuple(f"{EXAMPLE}:{f}" for f in (
    "build_v1", "build_v2", "build_v2_broken", "build_v2_incompatible", "build_v2_slow",
    "build_v2_flaky"))
JOB_ENV = EXAMPLE_ENV
# where a run's conf may put savepoints: read in the worker (example_savepoint_roots:
# $CKPT_EXAMPLE_DIR/savepoints and $CKPT_ALLOWED_SAVEPOINT_ROOTS), checked by check_conf
SAVEPOINT_ROOTS = example_savepoint_roots
# the PostgreSQL sinks' database (CKPT_EXAMPLE_PG_URL): empty, or the connection example_pg
SINKS = ConnectionChoice("CKPT_EXAMPLE_PG_URL", EXAMPLE_SINK_CONNECTIONS, param="sink_conn_id",
                         optional=True)

with DAG(
    dag_id="savepoint_upgrade_restore",
    description="stop v1 with a savepoint, start v2 from it, roll back to v1 on failure",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    doc_md=__doc__,
    tags=["checkpoint", "upgrade"],
    render_template_as_native_obj=True,
) as dag:
    savepoint_upgrade(
        pipelines=PIPELINES, old=f"{EXAMPLE}:build_v1", new=f"{EXAMPLE}:build_v2",
        job_name="versioned-sum", any_job_name=True, job_env=JOB_ENV, connections=[SINKS],
        savepoint_roots=SAVEPOINT_ROOTS, allowed_owner_dags=EXAMPLE_DAGS,
        first_checkpoint_timeout_s=300)  # v2 must checkpoint within this, else roll back
