"""Event triggers for Airflow's event-driven scheduling (``AssetWatcher``).

:class:`CheckpointCommittedEventTrigger` watches the metadata DB and fires one event per
newly completed checkpoint of the jobs named ``job_name`` (so it follows a job across
restarts, upgrades and blue-green cut-overs). A completed checkpoint is the point where the
job's two-phase-commit sinks publish that epoch: a DAG scheduled on the watched asset runs on
data that is committed. Checkpoints of fenced jobs (a blue-green validation run, whose
output is never published) are skipped.

A DAG author writes::

    from airflow.sdk import DAG, Asset, AssetWatcher
    from airflow_checkpoint_provider.triggers.events import CheckpointCommittedEventTrigger

    committed = Asset("orders_committed", watchers=[AssetWatcher(
        name="orders_checkpoints",
        trigger=CheckpointCommittedEventTrigger(job_name="orders"))])

    with DAG("orders_downstream", schedule=[committed]):
        ...  # triggering_asset_events[...].extra["payload"]: job_id, checkpoint_id, location

The trigger runs in the triggerer for as long as the asset is watched and yields an event
per checkpoint (it never returns). Its cursor lives in memory: after a triggerer restart it
starts from the newest checkpoint at that time (checkpoints completed while no triggerer ran
are covered by the next one: each event means "committed up to here"). Checkpoints that
complete and are subsumed between two polls are covered the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
from airflow_checkpoint_provider.triggers.conditions import SUCCESS


class CheckpointCommittedEventTrigger(BaseEventTrigger):
    """
    Fire one event per newly completed checkpoint of the jobs named ``job_name``.

    Event payload: ``status`` (``"success"``), ``job_name``, ``job_id``, ``checkpoint_id``,
    ``kind``, ``location``, ``complete_time`` (ISO-8601).

    :param job_name: the job name (every job of that name: restarts and upgrades included).
    :param kind: ``CHECKPOINT``, ``SAVEPOINT`` or ``None`` (both).
    :param include_fenced: also announce checkpoints of fenced (validation) jobs.
    :param checkpoint_conn_id: the metadata DB connection.
    :param poll_interval: seconds between polls.
    """

    def __init__(self, *, job_name: str, kind: str | None = "CHECKPOINT",
                 include_fenced: bool = False,
                 checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                 poll_interval: float = 5.0) -> None:
        super().__init__()
        self.job_name = job_name
        self.kind = kind
        self.include_fenced = include_fenced
        self.checkpoint_conn_id = checkpoint_conn_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.CheckpointCommittedEventTrigger",
                {"job_name": self.job_name, "kind": self.kind,
                 "include_fenced": self.include_fenced,
                 "checkpoint_conn_id": self.checkpoint_conn_id,
                 "poll_interval": self.poll_interval})

    def _completed(self, store: Any) -> list[Any]:  # runs in a worker thread
        return store.completed_checkpoints(job_name=self.job_name, kind=self.kind, limit=50)

    def _fenced(self, location: str) -> bool:  # runs in a worker thread
        from airflow_checkpoint_provider.engine.client import is_fenced_snapshot

        try:
            return is_fenced_snapshot(location)
        except Exception:  # noqa: BLE001 - gone (subsumed) or unreadable: not announced
            return True

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = CheckpointMetadataHook(checkpoint_conn_id=self.checkpoint_conn_id)
        try:
            seen = {(c.job_id, c.checkpoint_id) for c in await hook.arun(self._completed)}
            while True:
                await asyncio.sleep(self.poll_interval)
                try:
                    found = await hook.arun(self._completed)
                except Exception as exc:  # noqa: BLE001 - a DB hiccup: poll again
                    self.log.warning("Polling checkpoints of %s failed: %s", self.job_name, exc)
                    continue
                for c in sorted(found, key=lambda c: (c.complete_time, c.checkpoint_id)):
                    if (c.job_id, c.checkpoint_id) in seen:
                        continue
                    seen.add((c.job_id, c.checkpoint_id))
                    if not self.include_fenced and await asyncio.to_thread(self._fenced,
                                                                           c.location):
                        continue
                    yield TriggerEvent({
                        "status": SUCCESS, "job_name": self.job_name, "job_id": c.job_id,
                        "checkpoint_id": c.checkpoint_id, "kind": str(c.kind),
                        "location": c.location,
                        "complete_time": c.complete_time.isoformat() if c.complete_time else None})
                if len(seen) > 10_000:  # keep the ones still listed
                    seen &= {(c.job_id, c.checkpoint_id) for c in found}
        finally:
            await hook.aclose()
