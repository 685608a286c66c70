"""Record batches on the data path: the typed encoding (issue 35), so a field has the same
type whether its edge is chained (objects passed as they are), in the same slot (a
LocalChannel) or crosses a process (a TCP channel); batches written by earlier versions
(plain msgpack) still read."""

import datetime as dt
import socket
import threading
import uuid
import zoneinfo
from decimal import Decimal

import numpy as np
import pytest

from airflow_checkpoint_provider.engine.errors import BadRecordError
from airflow_checkpoint_provider.engine.protocol import frames as P
from airflow_checkpoint_provider.engine.runtime.host.channels import LocalChannel, OutputChannel
from airflow_checkpoint_provider.engine.runtime.task.mailbox import Mailbox
from airflow_checkpoint_provider.engine.serialization import (
    pack_records,
    packb,
    unpack_records,
    unpackb,
)

PLAIN = [{"key": "k", "n": 1, 2: "int key", None: 1.5, "bin": b"\x00\x01",
          "nested": {"l": [1, [2, 3]]}, "big": 2**64 - 1, "neg": -(2**63)}]
TYPED = [{"t": (1, (2, "x")), "s": {1, 2}, "fs": frozenset({"a"}), "tk": {(1, 2): "v"},
          "when": dt.datetime(2024, 3, 31, 2, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin")),
          "utc": dt.datetime(2024, 1, 1, tzinfo=dt.UTC), "day": dt.date(2024, 2, 29),
          "at": dt.time(23, 59, 59, 999999), "dur": dt.timedelta(days=-1, microseconds=3),
          "price": Decimal("12.3400"), "huge": 2**100, "nan": float("nan"),
          "np": np.float32(1.5), "id": uuid.UUID(int=7), "c": 1 + 2j, "l": [1, (2,)]}]


def same(a, b) -> bool:
    """Equal and of the same type, all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(k in b and same(v, b[k]) for k, v in a.items()) \
            and all(type(k) is type(next(x for x in b if x == k)) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a != a:
        return b != b
    if isinstance(a, dt.datetime) and a.tzinfo is not None:
        return a == b and type(a.tzinfo) is type(b.tzinfo) and a.tzinfo == b.tzinfo
    return a == b


def test_plain_records_are_msgpack_that_unpackb_reads():
    assert unpackb(pack_records(PLAIN)) == PLAIN


def test_unpack_records_reads_what_earlier_versions_wrote():
    assert unpack_records(packb(PLAIN)) == PLAIN
    # plain msgpack had no tuples: they were lists, and stay lists
    assert unpack_records(packb([{"t": (1, 2)}])) == [{"t": [1, 2]}]


def test_typed_fields_keep_their_types_through_the_encoding():
    assert same(unpack_records(pack_records(TYPED)), TYPED)


def test_a_local_channel_and_a_tcp_channel_deliver_the_types_a_chained_edge_passes():
    mailbox = Mailbox()
    gate = threading.Event()
    gate.set()
    LocalChannel(mailbox, gate, 0).send_records(P.RECORDS, TYPED, pack_records)
    local = mailbox.take(timeout=5)
    assert local[0] == "records" and same(local[2], TYPED)

    a, b = socket.socketpair()
    try:
        OutputChannel(a).send_records(P.RECORDS, TYPED, pack_records)
        kind, payload = P.recv_frame(b)
    finally:
        a.close()
        b.close()
    assert kind == P.RECORDS and same(unpack_records(payload), TYPED)


class Opaque:
    pass


@pytest.mark.parametrize(("field", "named"), [
    (dt.datetime(2024, 1, 1, tzinfo=type("Tz", (dt.tzinfo,), {})()), "tzinfo of type"),
])
def test_a_field_that_cannot_arrive_as_sent_is_a_bad_record_naming_its_type(field, named):
    with pytest.raises(BadRecordError, match=named):
        pack_records([{"f": field}])
