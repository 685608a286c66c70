"""The trigger of :class:`~airflow_checkpoint_provider.sensors.kafka.KafkaCaughtUpSensor`:
poll a job's Kafka consumer lag in the metadata DB (recorded with each completed checkpoint)
until it stayed at most ``max_lag`` records for ``for_seconds``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
from airflow_checkpoint_provider.triggers.checkpoint import _MetadataPollTrigger
from airflow_checkpoint_provider.triggers.conditions import Outcome, check_kafka_caught_up


class KafkaCaughtUpTrigger(_MetadataPollTrigger):
    """
    Fire when a job reading Kafka caught up: its consumer lag (summed over every partition)
    was at most ``max_lag`` records at every completed checkpoint over at least
    ``for_seconds`` (:func:`~.conditions.check_kafka_caught_up`); ``error`` when the job
    ended first or reads no Kafka topic.

    :param job: job id, id prefix or job name (its active job, else its newest).
    :param max_lag: the bound on the total lag, in records (offsets).
    :param for_seconds: how long the lag must stay within the bound, measured between the
        trigger times of the checkpoints that recorded it.
    :param after_time: count only checkpoints triggered at or after this ISO-8601 time.
    :param checkpoint_conn_id: the metadata DB connection.
    :param poll_interval: seconds between polls.
    :param end_time: give up (``timeout`` event) at this time, seconds since the epoch.
    """

    serialized_fields = ("job", "max_lag", "for_seconds", "after_time")

    def __init__(self, *, job: str, max_lag: int, for_seconds: float,
                 after_time: str | None = None,
                 checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                 poll_interval: float = 2.0, end_time: float | None = None,
                 access: dict[str, Any] | None = None) -> None:
        super().__init__(checkpoint_conn_id=checkpoint_conn_id, poll_interval=poll_interval,
                         end_time=end_time, access=access)
        self.job = job
        self.max_lag = max_lag
        self.for_seconds = for_seconds
        self.after_time = after_time

    def _what(self) -> str:
        return (f"job {self.job} to catch up with Kafka (lag at most {self.max_lag} records "
                f"for {self.for_seconds:g} s)")

    def _check(self, store: Any) -> Outcome | None:
        return check_kafka_caught_up(
            store, self.job, max_lag=self.max_lag, for_seconds=self.for_seconds,
            after_time=datetime.fromisoformat(self.after_time) if self.after_time else None,
            access=self.dag_access)
