"""The exceptions the lakehouse connectors raise. They define none of their own: a bad
option is a :class:`~...errors.ConfigurationError`, a record the table cannot take a
:class:`~...errors.BadRecordError`, a table that cannot go back to the restored checkpoint
(a source's version or snapshot expired) a :class:`~...errors.RestoreError`, a restored
transaction that does not decode a :class:`~...errors.CorruptCheckpointError`. They are
re-exported here so a caller catches them from the family's module."""

from __future__ import annotations

from ...errors import BadRecordError, ConfigurationError, CorruptCheckpointError, RestoreError

__all__ = ["BadRecordError", "ConfigurationError", "CorruptCheckpointError", "RestoreError"]
