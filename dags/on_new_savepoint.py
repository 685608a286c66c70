"""Runs after every new savepoint of the job ``versioned-sum``: an asset-scheduled DAG.

``TriggerSavepointOperator`` and ``StopWithSavepointOperator`` emit an asset event of
``checkpoint://<job_name>/savepoints`` for each savepoint they take (extras: ``job_id``,
``job_name``, ``checkpoint_id``, ``location``, ``kind``, ``complete_time``,
``state_size``). Copy this DAG and replace the task with what should follow a savepoint:
copy it off-site, verify it restores into the next version (``VerifyRestoreOperator``),
open a change ticket.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

from airflow_checkpoint_provider.assets import savepoint_asset
from airflow_checkpoint_provider.params import EXAMPLE_DEFAULT_ARGS

with DAG(
    dag_id="on_new_savepoint",
    default_args=EXAMPLE_DEFAULT_ARGS,
    description="react to a new savepoint of versioned-sum",
    schedule=savepoint_asset("versioned-sum"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    doc_md=__doc__,
    tags=["checkpoint"],
) as dag:

    @task
    def new_savepoints(**context) -> list[dict]:
        """The savepoints that triggered this run, one dict of extras each."""
        found = []
        for asset_key, events in context["triggering_asset_events"].items():
            for event in events:
                print(f"{asset_key}: savepoint {event.extra.get('checkpoint_id')} of job "
                      f"{event.extra.get('job_id')} at {event.extra.get('location')}")
                found.append(dict(event.extra))
        return found

    new_savepoints()
