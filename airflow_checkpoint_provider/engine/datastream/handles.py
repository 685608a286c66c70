"""The stream types as the DSL's helper modules (joins, broadcast, temporal and regular
joins, windows, the upsert materializer) name them.

:mod:`.api` defines ``DataStream`` and ``KeyedStream`` and imports those modules to build
their streams, so they cannot import :mod:`.api` back, not even under ``TYPE_CHECKING``
(tests/unit/architecture/test_layers.py refuses import circles): they take and return streams typed as these
aliases. At run time they are always :class:`.api.DataStream` / :class:`.api.KeyedStream`
instances.
"""

from __future__ import annotations

from typing import Any, TypeAlias

DataStream: TypeAlias = Any
KeyedStream: TypeAlias = Any
