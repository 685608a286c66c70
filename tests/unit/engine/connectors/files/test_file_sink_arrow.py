"""FileSink's Arrow path (``accepts_arrow``): a RecordBatch is written without turning its
rows into dicts, and the committed files -- partition directories, names and bytes -- are
exactly those of the dict path (``batch.to_pylist()``) for random batches of many Arrow
types, typed partition values, the default partition (``None`` and ``""``) and partition
columns whose type changes from batch to batch."""

from __future__ import annotations

import datetime
import decimal
import os
import tempfile

import msgspec
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_checkpoint_provider.engine import BadRecordError, FileSink
from airflow_checkpoint_provider.engine.connectors.base import ConnectorContext
from airflow_checkpoint_provider.engine.connectors.files.arrow_lines import (
    _timestamps,
    json_lines,
    lines_buffer,
)
from airflow_checkpoint_provider.engine.connectors.files.partitions import (
    DEFAULT_PARTITION,
    group_batch_by_partition,
)
from airflow_checkpoint_provider.engine.connectors.files.sink import STAGING

CTX = ConnectorContext(job_id="job-1", job_name="j", operator_uid="out", subtask_index=0,
                       parallelism=1, attempt=0)
ROWS = st.integers(0, 12)
UTC = datetime.UTC

# -- value columns: (Arrow type, strategy of its Python values) -------------------------------
_text = st.text(max_size=8)  # any code point but surrogates: quotes, backslashes, controls
_int64 = st.integers(-(2**63), 2**63 - 1)
_float = st.floats(allow_nan=True, allow_infinity=True)
_ts = st.datetimes()  # years 1-9999; formatted by Arrow (s, ms, us; naive or UTC), not msgspec
VALUE_TYPES: list[tuple[pa.DataType, st.SearchStrategy]] = [
    (pa.int8(), st.integers(-128, 127)),
    (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    (pa.int64(), _int64),
    (pa.uint64(), st.integers(0, 2**64 - 1)),
    (pa.float64(), _float),
    (pa.float32(), st.floats(width=32)),
    (pa.bool_(), st.booleans()),
    (pa.string(), _text),
    (pa.large_string(), _text),
    (pa.binary(), st.binary(max_size=6)),
    (pa.null(), st.none()),
    (pa.date32(), st.dates()),
    (pa.timestamp("ms"), _ts.map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))),
    (pa.timestamp("us"), _ts),
    (pa.timestamp("us", tz="UTC"), _ts.map(lambda d: d.replace(tzinfo=UTC))),
    (pa.timestamp("s"), _ts.map(lambda d: d.replace(microsecond=0))),
    (pa.timestamp("ms", tz="UTC"),
     _ts.map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000, tzinfo=UTC))),
    (pa.timestamp("us", tz="Europe/Paris"), _ts.map(lambda d: d.replace(tzinfo=UTC))),  # msgspec
    (pa.time64("us"), st.times()),
    (pa.duration("us"), st.timedeltas(min_value=datetime.timedelta(days=-999),
                                      max_value=datetime.timedelta(days=999))),
    (pa.decimal128(12, 3), st.decimals(min_value=-10**8, max_value=10**8, places=3,
                                       allow_nan=False)),
    (pa.list_(pa.int64()), st.lists(st.one_of(st.none(), _int64), max_size=3)),
    (pa.list_(pa.string()), st.lists(_text, max_size=3)),
    (pa.struct([("a", pa.int64()), ("b", pa.string())]),
     st.fixed_dictionaries({"a": st.one_of(st.none(), _int64), "b": _text})),
    (pa.list_(pa.struct([("x", pa.float64())])),
     st.lists(st.fixed_dictionaries({"x": _float}), max_size=2)),
    (pa.map_(pa.string(), pa.int64()), st.lists(st.tuples(_text, _int64), max_size=2)),
]

# -- partition columns: few distinct values, so batches mix partitions --------------------------
PARTITION_TYPES: list[tuple[pa.DataType, st.SearchStrategy]] = [
    (pa.string(), st.sampled_from(["a", "b", "", "x:y/z", "%41", "é"])),
    (pa.large_string(), st.sampled_from(["a", "", "10-00"])),
    (pa.int64(), st.sampled_from([0, 1, -7, 2**40])),
    (pa.int8(), st.sampled_from([0, 1, 2])),
    (pa.bool_(), st.booleans()),
    (pa.date32(), st.sampled_from([datetime.date(2026, 11, 25), datetime.date(1999, 1, 1)])),
    (pa.float64(), st.sampled_from([0.0, -0.0, 1.0, 2.5])),  # the dict path (not groupable)
    (pa.timestamp("s"), st.sampled_from([datetime.datetime(2026, 1, 1, 10)])),  # the dict path
]


@st.composite
def columns(draw, types, n: int, *, nulls: bool = True) -> pa.Array:
    t, values = draw(st.sampled_from(types))
    vals = draw(st.lists(st.one_of(st.none(), values) if nulls else values, min_size=n,
                         max_size=n))
    return pa.array(vals, t)


@st.composite
def batches(draw, partition_by: tuple[str, ...] = ()) -> pa.RecordBatch:
    n = draw(ROWS)
    names = draw(st.lists(st.sampled_from(["v", "w", "name", 'q"\\', "é\n", "x"]),
                          unique=True, max_size=4))
    arrays = [draw(columns(VALUE_TYPES, n)) for _ in names]
    for p in partition_by:  # anywhere among the value columns
        at = draw(st.integers(0, len(names)))
        names.insert(at, p)
        arrays.insert(at, draw(columns(PARTITION_TYPES, n)))
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _committed(batches_: list, *, arrow: bool, partition_by, keep: bool,
               max_open: int) -> dict[str, bytes] | type[Exception]:
    """Every committed file (relative path -> bytes) after writing ``batches_`` through one
    writer, as Arrow or as dicts; or the type of the error the writer raised."""
    with tempfile.TemporaryDirectory() as root:
        sink = FileSink(root, partition_by=partition_by, keep_partition_columns=keep,
                        max_open_writers=max_open)
        writer = sink.create_writer(CTX)
        try:
            for b in batches_:
                writer.write(b if arrow else b.to_pylist())
        except BadRecordError as exc:
            writer.close()
            return type(exc)
        writer.commit(writer.pre_commit(1))
        writer.close()
        out = {}
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x != STAGING]
            for name in names:
                path = os.path.join(d, name)
                with open(path, "rb") as f:
                    out[os.path.relpath(path, root)] = f.read()
        assert not os.listdir(os.path.join(root, STAGING))
        return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_json_lines_are_the_bytes_msgspec_writes_for_the_batch_dicts(batch):
    lines = json_lines(batch)
    assert lines is not None  # every type above goes the Arrow path (names are unique)
    for col in batch.columns:  # timestamps of s, ms, us, naive or UTC: without to_pylist
        t = col.type
        if pa.types.is_timestamp(t) and t.unit != "ns" and t.tz in (None, "UTC"):
            assert _timestamps(col, ord(",")) is not None
    assert bytes(lines_buffer(lines)) == msgspec.json.Encoder().encode_lines(batch.to_pylist())
    for start in range(len(batch)):  # a slice's bytes are its rows' lines
        assert bytes(lines_buffer(lines.slice(start, 2))) == \
            msgspec.json.Encoder().encode_lines(batch.slice(start, 2).to_pylist())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_arrow_path_commits_the_files_of_the_dict_path(data):
    partition_by = data.draw(st.sampled_from([(), ("dt",), ("dt", "hm")]))
    keep = data.draw(st.booleans())
    max_open = data.draw(st.sampled_from([1, 2, 100]))
    # several batches through one writer: a partition column's type may change between
    # them (1, 1.0 and True are different partitions), paths come from one cache
    seq = data.draw(st.lists(batches(partition_by), min_size=1, max_size=3))
    as_dicts = _committed(seq, arrow=False, partition_by=partition_by, keep=keep,
                          max_open=max_open)
    as_arrow = _committed(seq, arrow=True, partition_by=partition_by, keep=keep,
                          max_open=max_open)
    assert as_arrow == as_dicts


def test_a_batch_of_two_partitions_goes_the_arrow_path_with_the_default_partition_merged():
    batch = pa.RecordBatch.from_pydict({
        "v": [1, 2, 3, 4, 5], "dt": [None, "a", "", None, "a"]})
    groups = group_batch_by_partition(batch, ("dt",), {}, where="test")
    assert groups is not None
    got = {path: rows.tolist() for path, rows in groups}
    # the rows with None, then those with "" (the dict path's order), then partition a
    assert got == {f"dt={DEFAULT_PARTITION}": [0, 3, 2], "dt=a": [1, 4]}
    assert list(got) == [f"dt={DEFAULT_PARTITION}", "dt=a"]
    with tempfile.TemporaryDirectory() as root:
        writer = FileSink(root, partition_by=["dt"]).create_writer(CTX)
        assert writer._write_arrow(batch)  # not the dict path
        writer.close()


def test_a_batch_of_one_partition_is_one_group_without_row_indices():
    batch = pa.RecordBatch.from_pydict({"v": [1, 2], "dt": ["2026-11-25"] * 2, "hm": ["10:00"] * 2})
    assert group_batch_by_partition(batch, ("dt", "hm"), {}, where="test") == \
        [("dt=2026-11-25/hm=10%3A00", None)]


def test_a_float_partition_column_or_a_repeated_name_takes_the_dict_path():
    batch = pa.RecordBatch.from_pydict({"v": [1], "f": [0.5]})
    assert group_batch_by_partition(batch, ("f",), {}, where="test") is None
    twice = pa.RecordBatch.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    assert json_lines(twice) is None
    with tempfile.TemporaryDirectory() as root:
        writer = FileSink(root).create_writer(CTX)
        writer.write(twice)  # through the dict path: {"a": 2}
        writer.commit(writer.pre_commit(1))
        (name,) = [n for n in os.listdir(root) if n.startswith("part-")]
        with open(os.path.join(root, name), "rb") as f:
            assert f.read() == b'{"a":2}\n'


def test_a_batch_without_a_partition_column_is_a_bad_record():
    batch = pa.RecordBatch.from_pydict({"v": [1]})
    with pytest.raises(BadRecordError, match="no partition column 'dt'"):
        group_batch_by_partition(batch, ("dt",), {}, where="test")


def test_a_table_is_written_batch_by_batch():
    table = pa.Table.from_batches([pa.RecordBatch.from_pydict({"v": [1, 2]}),
                                   pa.RecordBatch.from_pydict({"v": [3]})])
    assert _committed([table], arrow=True, partition_by=(), keep=False, max_open=1) == \
        _committed([table.to_batches()[0], table.to_batches()[1]], arrow=False,
                   partition_by=(), keep=False, max_open=1)


def test_decimal_values_are_written_as_on_the_dict_path():
    batch = pa.RecordBatch.from_pydict({"d": pa.array([decimal.Decimal("1.50"), None],
                                                      pa.decimal128(5, 2))})
    assert bytes(lines_buffer(json_lines(batch))) == b'{"d":"1.50"}\n{"d":null}\n'


def test_timestamps_outside_python_datetimes_fail_as_on_the_dict_path():
    batch = pa.RecordBatch.from_pydict({"t": pa.array([253_402_300_800], pa.timestamp("s"))})
    assert _timestamps(batch.column(0), ord("}")) is None  # year 10000
    with pytest.raises(OverflowError):
        batch.to_pylist()  # what the dict path did
    with tempfile.TemporaryDirectory() as root, pytest.raises(OverflowError):
        FileSink(root).create_writer(CTX).write(batch)


def test_nanosecond_timestamps_fail_as_on_the_dict_path():
    """``to_pylist`` makes pandas Timestamps of them, which neither msgspec nor json.dumps
    encodes: the dict path fails, and so does the Arrow path (it leaves them to it)."""
    batch = pa.RecordBatch.from_pydict(
        {"t": pa.array([datetime.datetime(2000, 1, 1)], pa.timestamp("ns"))})
    assert _timestamps(batch.column(0), ord("}")) is None
    for records in (batch, batch.to_pylist()):
        with tempfile.TemporaryDirectory() as root, pytest.raises(TypeError):
            FileSink(root).create_writer(CTX).write(records)
