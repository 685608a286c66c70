"""Record batches on the data path: msgspec's msgpack, readable by msgpack and back."""

from airflow_checkpoint_provider.engine.serialization import (
    pack_records,
    packb,
    unpack_records,
    unpackb,
)

RECORDS = [{"key": "k", "n": 1, 2: "int key", None: 1.5, "bin": b"\x00\x01",
            "nested": {"l": [1, [2, 3]]}, "big": 2**64 - 1, "neg": -(2**63)}]


def test_packed_records_are_the_msgpack_that_unpackb_reads():
    assert unpackb(pack_records(RECORDS)) == RECORDS


def test_unpack_records_reads_what_packb_wrote():
    assert unpack_records(packb(RECORDS)) == RECORDS


def test_tuples_arrive_as_lists_as_with_msgpack():
    assert unpack_records(pack_records([{"t": (1, 2)}])) == unpackb(packb([{"t": (1, 2)}]))
