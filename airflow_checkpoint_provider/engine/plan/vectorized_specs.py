"""The specs of the vectorized keyed operators (:mod:`..vectorized_ops`): what the DSL
(:mod:`..datastream.vectorized_ops`) puts in a job graph node's ``payload`` and the runtime
(:mod:`..runtime.operators.vectorized`) builds its operator from.

Plain data below both layers, as :mod:`.specs` is for the two-input operators: the DSL
builds a spec without importing the runtime. ``describe()`` is what the plan shows of each.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MaxJoinSpec:
    """The expiring max-by join (``max_by_join``)."""

    left_key: str
    right_key: str
    start: str
    end: str
    right_time: str
    by: str
    #: right column -> output column name
    right_columns: dict[str, str] = field(default_factory=dict)

    def describe(self) -> dict:
        return {"left_key": self.left_key, "right_key": self.right_key, "start": self.start,
                "end": self.end, "right_time": self.right_time, "by": self.by,
                "right_columns": dict(self.right_columns)}

    @property
    def right_needed(self) -> list[str]:
        """The right columns the state keeps: key, time, ``by``, then the output ones."""
        names = [self.right_key, self.right_time, self.by]
        return names + [c for c in self.right_columns if c not in names]


@dataclass
class LatestSpec:
    """The latest row per key (``latest_by_key``)."""

    key: str
    by: str

    def describe(self) -> dict:
        return {"key": self.key, "by": self.by}


@dataclass
class UniqueJoinSpec:
    """The join of a stream with a table of unique keys (``unique_key_join``)."""

    stream_key: str
    table_key: str

    def describe(self) -> dict:
        return {"stream_key": self.stream_key, "table_key": self.table_key}


@dataclass
class TemporalTableJoinSpec:
    """The event-time join of probes with the version of a table valid at their time
    (``temporal_table_join``)."""

    probe_key: str
    table_key: str
    probe_time: str
    #: None: a table without time (every row valid since the beginning)
    table_time: str | None
    how: str = "inner"

    def describe(self) -> dict:
        return {"probe_key": self.probe_key, "table_key": self.table_key,
                "probe_time": self.probe_time, "table_time": self.table_time, "how": self.how}
