"""Which sinks the TRUNCATE recovery empties (connectors/postgres/cdc/recovery.py): it asks the
sink's upsert capability (``SupportsUpsert`` in mode ``"upsert"``), not an attribute probe.
No server: every case is decided before a connection would be opened."""

from __future__ import annotations

import pytest

from airflow_checkpoint_provider.engine import DiscardSink, FileSink
from airflow_checkpoint_provider.engine.connectors.base import Sink
from airflow_checkpoint_provider.engine.connectors.capabilities import SupportsUpsert
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.recovery import (
    empty_upsert_target,
)
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink
from airflow_checkpoint_provider.engine.errors import ConfigurationError


class _UpsertOfItsOwn(Sink, SupportsUpsert):
    """A third-party upsert sink: the capability is there, the engine cannot empty it."""

    def __init__(self, mode: str) -> None:
        self.mode, self.key = mode, ["id"] if mode == "upsert" else []


class _ModeWithoutKey(Sink):
    """A ``mode`` attribute alone is no upsert capability (an attribute probe took it for one)."""

    mode = "upsert"


@pytest.mark.parametrize(("sink", "why"), [
    (PostgresSink("postgresql://u@127.0.0.1:1/db", "items"), "mode='2pc'"),
    (_UpsertOfItsOwn("append"), "mode='append'"),
    (FileSink("/nonexistent/out"), "it has no upsert mode"),
    (DiscardSink(), "it has no upsert mode"),
    (_ModeWithoutKey(), "it has no upsert mode"),
])
def test_a_sink_that_does_not_apply_changelogs_per_key_is_not_emptied(sink, why):
    with pytest.raises(ConfigurationError, match=rf"not an upsert sink \({why}\)"):
        empty_upsert_target(sink)


def test_an_upsert_sink_the_engine_cannot_empty_says_to_empty_it_by_hand():
    with pytest.raises(ConfigurationError, match="empty it by hand"):
        empty_upsert_target(_UpsertOfItsOwn("upsert"))
