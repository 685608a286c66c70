"""Run a DAG on committed data: one run per completed checkpoint of a job (event-driven).

An ``AssetWatcher`` runs :class:`~airflow_checkpoint_provider.triggers.events.
CheckpointCommittedEventTrigger` in the triggerer; each checkpoint of a job named
``$CKPT_WATCHED_JOB`` (default ``versioned-sum``) that completes -- the moment its
two-phase-commit sinks publish that epoch -- becomes an asset event, and this DAG runs with
the checkpoint in the event's ``payload`` (job id, checkpoint id, location). It follows the
job across restarts and upgrades (every job of that name) and ignores fenced validation
runs of a blue-green upgrade (they publish nothing).
"""

from __future__ import annotations

import logging
import os

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_checkpoint_provider.params import EXAMPLE_DEFAULT_ARGS
from airflow_checkpoint_provider.triggers.events import CheckpointCommittedEventTrigger

JOB_NAME = os.environ.get("CKPT_WATCHED_JOB", "versioned-sum")

committed = Asset(f"{JOB_NAME}-committed", watchers=[AssetWatcher(
    name=f"{JOB_NAME}-checkpoints",
    trigger=CheckpointCommittedEventTrigger(job_name=JOB_NAME, poll_interval=5.0))])

with DAG(
    dag_id="on_committed_checkpoint",
    default_args=EXAMPLE_DEFAULT_ARGS,
    description="runs once per completed checkpoint: its output is committed",
    schedule=[committed],
    tags=["checkpoint", "assets"],
    doc_md=__doc__,
) as dag:

    @task
    def read_committed(triggering_asset_events=None) -> list[dict]:
        payloads = [e.extra.get("payload", {}) for events in triggering_asset_events.values()
                    for e in events]
        for p in payloads:
            logging.getLogger(__name__).info(
                "Job %s (%s): checkpoint %s committed at %s", p.get("job_name"),
                p.get("job_id"), p.get("checkpoint_id"), p.get("complete_time"))
        return payloads

    read_committed()
