"""What the snapshot and the stream splits of the PostgreSQL CDC source share: value
conversion from text, the key-hash buckets (Python and SQL twins), xid visibility in a
snapshot, table descriptions and the announcement prefix (the source's error, :class:`~..errors.CdcError`,
was defined here)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import CdcError as CdcError  # defined here before issue 53

#: prefix of the logical messages snapshot splits announce their parts with
MESSAGE_PREFIX = "ckpt-cdc"
_INT, _FLOAT, _BOOL = frozenset((20, 21, 23, 26)), frozenset((700, 701)), 16
KEY_SEP = "\x1f"


def convert(text: str | None, type_oid: int):
    """A value from its PostgreSQL text form."""
    if text is None:
        return None
    if type_oid in _INT:
        return int(text)
    if type_oid in _FLOAT:
        return float(text)
    if type_oid == _BOOL:
        return text == "t"
    return text


def bucket_of(key_texts: Sequence[str], buckets: int) -> int:
    """The snapshot bucket of a key (its columns' text forms); the SQL twin is
    :func:`_bucket_sql`."""
    digest = hashlib.md5(KEY_SEP.join(key_texts).encode()).hexdigest()
    return int(digest[:8], 16) % buckets


def _bucket_sql(key: Sequence[str], buckets: int):
    from psycopg import sql

    text = (sql.SQL("{}::text").format(sql.Identifier(key[0])) if len(key) == 1 else
            sql.SQL("concat_ws({}, {})").format(sql.Literal(KEY_SEP), sql.SQL(", ").join(
                sql.SQL("{}::text").format(sql.Identifier(k)) for k in key)))
    return sql.SQL("((('x' || lpad(substr(md5({}), 1, 8), 16, '0'))::bit(64)::bigint) % {})").format(
        text, sql.Literal(buckets))


def parse_snapshot(text: str) -> tuple[int, int, frozenset[int]]:
    xmin, xmax, xip = text.split(":")
    return int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x)


def visible(xid: int, snapshot: tuple[int, int, frozenset[int]]) -> bool:
    """Whether top-level transaction ``xid`` (32 bits, from a pgoutput Begin) is visible in
    ``snapshot`` (64-bit xids: the epoch is the one nearest the snapshot's xmax)."""
    xmin, xmax, xip = snapshot
    x = (xmax & ~0xFFFFFFFF) | xid
    if x > xmax + (1 << 31):
        x -= 1 << 32
    elif x < xmax - (1 << 31):
        x += 1 << 32
    return x < xmin or (x < xmax and x not in xip)


#: fields the changelog adds to a record: a source column of one of these names is refused
RESERVED_COLUMNS = ("_op", "_table", "_lsn", "_commit_ts")


@dataclass
class TableInfo:
    name: str                    #: schema.table
    columns: list[tuple[str, int]]  #: (name, type oid) in column order
    key: list[str]
    oid: int = 0                 #: pg_class oid: identifies the table across renames
