"""Real savepoint directories and their metadata rows, without running a job: a verified
``_metadata`` (no operators) and one state file per savepoint, completed at a chosen age."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta

from airflow_checkpoint_provider.engine.snapshot.codec import encode_metadata

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def make_job(store, name="orders", status="STOPPED", restored_from=None) -> str:
    job_id = uuid.uuid4().hex
    store.create_job(job_id=job_id, job_name=name, parallelism=1, restored_from=restored_from)
    if status != "CREATED":
        store.set_job_status(job_id, status)
    return job_id


def make_savepoint(store, root, job_id, checkpoint_id, *, hours_old: float,
                   kind="SAVEPOINT", now: datetime = NOW) -> str:
    """A completed savepoint ``hours_old`` hours before NOW: directory, ``_metadata``, one
    state file, and its COMPLETED row."""
    directory = os.path.join(str(root), f"savepoint-{job_id[:8]}-{checkpoint_id}")
    os.makedirs(directory)
    job = store.get_job(job_id)
    with open(os.path.join(directory, "_metadata"), "wb") as f:
        f.write(encode_metadata({"kind": kind, "job_id": job_id, "job_name": job.job_name,
                                 "checkpoint_id": checkpoint_id, "timestamp_ms": 0,
                                 "operators": {}}))
    with open(os.path.join(directory, "state-0.bin"), "wb") as f:
        f.write(b"x" * 100)
    when = now - timedelta(hours=hours_old)
    store.add_pending_checkpoint(job_id, checkpoint_id, kind=kind, trigger_time=when,
                                 location=directory)
    store.complete_checkpoint(job_id, checkpoint_id, complete_time=when, duration_ms=10,
                              state_size=100, checkpointed_size=100, task_stats=[])
    return directory


def history(store, root, job_id, ages=(40, 30, 20, 10)) -> list[str]:
    """Savepoints of ``job_id``, oldest first."""
    return [make_savepoint(store, root, job_id, i + 1, hours_old=age)
            for i, age in enumerate(ages)]


class FakeTI:
    """The task instance an operator's ``execute`` reads from its context: its identity
    (idempotency keys and pin holders are derived from it) and the XComs it pushes."""

    map_index = -1

    def __init__(self, dag_id: str, task_id: str, run_id: str = "manual__1",
                 try_number: int = 1) -> None:
        self.dag_id, self.task_id, self.run_id = dag_id, task_id, run_id
        self.try_number = try_number
        self.xcom: dict[str, object] = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value
