"""A sensor on the Kafka consumer lag of a checkpointed job, deferrable through
:class:`~airflow_checkpoint_provider.triggers.kafka.KafkaCaughtUpTrigger`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_checkpoint_provider.sensors.checkpoint import _MetadataSensor
from airflow_checkpoint_provider.triggers.conditions import Outcome, check_kafka_caught_up
from airflow_checkpoint_provider.triggers.kafka import KafkaCaughtUpTrigger

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger


class KafkaCaughtUpSensor(_MetadataSensor):
    """
    Wait until a job reading Kafka has caught up: its consumer lag, summed over every
    partition of its Kafka sources (end offset minus the checkpointed position, recorded with
    each completed checkpoint), stayed at most ``max_lag`` records for ``for_seconds``
    (between the trigger times of the checkpoints that recorded it), while the job is
    RUNNING. A blue-green gate: green restored blue's offsets and must have worked off the
    backlog before the cut-over. Fails at once when the job ends first or reads no Kafka
    topic. The XCom value: ``job_id``, ``checkpoint_id``, ``total_lag``, ``partitions``
    (``{"topic:partition": lag}``), ``caught_up_since``, ``seconds``.

    :param job: job id, id prefix or job name (its active job, else its newest). Templated.
    :param max_lag: the bound on the total lag, in records (``0``: fully caught up). Templated.
    :param for_seconds: how long the lag must stay within the bound; ``0``: one checkpoint
        within it is enough. Templated.
    :param after_time: count only checkpoints triggered at or after this time (datetime or
        ISO-8601 string; naive means UTC). Templated.
    :param checkpoint_conn_id: the metadata DB connection.
    :param deferrable: wait in the triggerer (default: Airflow's
        ``[operators] default_deferrable``).
    :param allowed_owner_dags: DAGs besides this one whose jobs the sensor may wait for.
    """

    template_fields: Sequence[str] = ("job", "max_lag", "for_seconds", "after_time")

    def __init__(self, *, job: str, max_lag: int | str = 0, for_seconds: float | str = 30.0,
                 after_time: datetime | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.max_lag = max_lag
        self.for_seconds = for_seconds
        self.after_time = after_time

    def _bounds(self) -> tuple[int, float]:
        max_lag, for_seconds = int(self.max_lag), float(self.for_seconds)
        if max_lag < 0 or for_seconds < 0:
            raise ValueError(f"{self.task_id}: max_lag ({max_lag}) and for_seconds "
                             f"({for_seconds}) cannot be negative")
        return max_lag, for_seconds

    def _after_time(self) -> str | None:
        value = self.after_time
        if value in (None, "", "None"):
            return None
        when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).isoformat()

    def condition(self, store: Any) -> Outcome | None:
        max_lag, for_seconds = self._bounds()
        after_time = self._after_time()
        return check_kafka_caught_up(
            store, self.job, max_lag=max_lag, for_seconds=for_seconds,
            after_time=datetime.fromisoformat(after_time) if after_time else None,
            access=self.access)

    def trigger(self, end_time: float) -> BaseTrigger:
        max_lag, for_seconds = self._bounds()
        return KafkaCaughtUpTrigger(
            job=self.job, max_lag=max_lag, for_seconds=for_seconds,
            after_time=self._after_time(), access=self.trigger_access,
            checkpoint_conn_id=self.checkpoint_conn_id, poll_interval=self.poke_interval,
            end_time=end_time)
