"""Changelog rows: the contract between change-data-capture sources, operators that accept
retractions and upsert sinks.

A changelog record is an ordinary record (a dict, or a row of an Arrow batch) with one more
field, :data:`OP_FIELD`, holding its kind, as Flink's ``RowKind``:

* ``+I`` insert, ``-U`` the row before an update, ``+U`` the row after it, ``-D`` delete.

A record without the field is an insert (append-only streams are changelogs of inserts).
An update travels as ``-U`` then ``+U`` in that order, in one epoch and on one channel
(both carry the same key, so a keyed exchange keeps them together). A ``-D`` or ``-U``
carries at least the key columns; CDC sources send the whole old row when the table's
``REPLICA IDENTITY`` gives it.
"""

from __future__ import annotations

from .errors import BadRecordError

#: the field that holds a changelog record's kind
OP_FIELD = "_op"
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = "+I", "-U", "+U", "-D"
ROW_KINDS = (INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE)
#: the kinds that add a row to a result / remove one from it
ACCUMULATE = frozenset((INSERT, UPDATE_AFTER))
RETRACT = frozenset((UPDATE_BEFORE, DELETE))


def row_kind(record: dict, where: str = "changelog") -> str:
    """The kind of ``record`` (``+I`` when it has no :data:`OP_FIELD`); a value that is not
    one of :data:`ROW_KINDS` raises :class:`BadRecordError` naming ``where``."""
    op = record.get(OP_FIELD, INSERT)
    if op not in ROW_KINDS:
        raise BadRecordError(
            f"{where}: record field {OP_FIELD!r} is {op!r}, not one of {', '.join(ROW_KINDS)}")
    return op
