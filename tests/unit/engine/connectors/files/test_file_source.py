from __future__ import annotations

import csv
import json
import os

import msgpack
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.files.source import (
    FileSource,
    MalformedFileError,
)
from airflow_checkpoint_provider.engine.errors import ConfigurationError, RestoreError
from airflow_checkpoint_provider.engine.runtime.batches import as_rows

CTX = SourceContext(
    job_id="j", job_name="n", operator_uid="src", subtask_index=0, parallelism=1, attempt=0
)
FORMATS = ["jsonl", "csv", "parquet"]
N = 23  # records per file; Parquet files have row groups of 7 rows


def make_records(n: int, tag: str) -> list[dict]:
    return [{"id": i, "key": f"k{i % 3}", "value": f"{tag}-{i}"} for i in range(n)]


def write_jsonl(path, records, *, trailing_newline=True) -> None:
    text = "\n".join(json.dumps(r) for r in records)
    if trailing_newline and records:
        text += "\n"
    path.write_text(text, encoding="utf-8")


def write_csv(path, records) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["id", "key", "value"])
        writer.writeheader()
        writer.writerows(records)


def write_parquet(path, records, *, row_group_size=7) -> None:
    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=row_group_size)


WRITERS = {"jsonl": write_jsonl, "csv": write_csv, "parquet": write_parquet}


def make_source(tmp_path, fmt: str, files: dict[str, int]) -> tuple[FileSource, dict]:
    """Write ``files`` (relative name -> record count) and return the source and contents."""
    expected = {}
    for name, n in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        records = make_records(n, name)
        WRITERS[fmt](path, records)
        expected[name] = records
    csv_types = {"id": int} if fmt == "csv" else None
    return FileSource(str(tmp_path), format=fmt, csv_types=csv_types), expected


def read_all(reader, batch_size: int) -> list[dict]:
    out: list[dict] = []
    while (batch := reader.read_batch(batch_size)) is not None:
        assert len(batch) <= batch_size
        out.extend(as_rows(batch))  # Parquet gives Arrow batches
    return out


def read_n(reader, n: int, batch_size: int = 4) -> list[dict]:
    out: list[dict] = []
    while len(out) < n:
        batch = reader.read_batch(min(batch_size, n - len(out)))
        assert batch is not None
        out.extend(as_rows(batch))  # Parquet gives Arrow batches
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_reading_in_small_batches_returns_every_record_in_order(tmp_path, fmt):
    source, expected = make_source(tmp_path, fmt, {f"a.{fmt}": N, f"b.{fmt}": 5})

    assert source.splits() == [f"a.{fmt}", f"b.{fmt}"]
    for split in source.splits():
        reader = source.open_split(split, None, CTX)
        assert read_all(reader, 3) == expected[split]
        assert reader.read_batch(3) is None
        reader.close()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("k", [0, 1, 6, 7, 8, 14, 15, N - 1, N])
def test_restore_from_position_continues_without_gaps_or_duplicates(tmp_path, fmt, k):
    source, expected = make_source(tmp_path, fmt, {f"data.{fmt}": N})
    split = f"data.{fmt}"

    reader = source.open_split(split, None, CTX)
    head = read_n(reader, k)
    position = msgpack.unpackb(msgpack.packb(reader.position()))  # as a checkpoint holds it
    reader.close()

    restarted = FileSource(str(tmp_path), format=fmt, csv_types=source.csv_types or None)
    resumed = restarted.open_split(split, position, CTX)
    tail = read_all(resumed, 5)

    assert head + tail == expected[split]
    assert resumed.read_batch(5) is None
    end = os.path.getsize(tmp_path / split) if fmt == "jsonl" else N  # bytes or rows
    assert resumed.position() == end


@pytest.mark.parametrize("fmt", FORMATS)
def test_position_after_exhaustion_reopens_as_exhausted(tmp_path, fmt):
    source, expected = make_source(tmp_path, fmt, {f"data.{fmt}": N})
    reader = source.open_split(f"data.{fmt}", None, CTX)
    assert read_all(reader, 100) == expected[f"data.{fmt}"]
    end = reader.position()

    assert source.open_split(f"data.{fmt}", end, CTX).read_batch(10) is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_split_is_exhausted_at_once(tmp_path, fmt):
    source, _ = make_source(tmp_path, fmt, {f"empty.{fmt}": 0})
    reader = source.open_split(f"empty.{fmt}", None, CTX)
    assert reader.read_batch(10) is None


def test_jsonl_position_is_the_byte_offset_of_the_next_line(tmp_path):
    source, expected = make_source(tmp_path, "jsonl", {"a.jsonl": 3})
    reader = source.open_split("a.jsonl", None, CTX)
    reader.read_batch(2)
    lines = (tmp_path / "a.jsonl").read_bytes().splitlines(keepends=True)
    assert reader.position() == len(lines[0]) + len(lines[1])


def test_jsonl_last_line_without_newline_and_blank_lines(tmp_path):
    records = make_records(6, "x")
    path = tmp_path / "a.jsonl"
    write_jsonl(path, records, trailing_newline=False)
    text = path.read_text()
    path.write_text("\n" + text.replace("\n", "\n\n", 1))  # blank lines at start and inside
    source = FileSource(str(tmp_path), format="jsonl")

    for k in range(len(records) + 1):
        reader = source.open_split("a.jsonl", None, CTX)
        head = read_n(reader, k, batch_size=2)
        resumed = source.open_split("a.jsonl", reader.position(), CTX)
        assert head + read_all(resumed, 2) == records
    assert resumed.position() == path.stat().st_size


def test_csv_values_are_strings_unless_typed(tmp_path):
    write_csv(tmp_path / "a.csv", make_records(2, "x"))
    untyped = FileSource(str(tmp_path), format="csv").open_split("a.csv", None, CTX)
    assert untyped.read_batch(10) == [
        {"id": "0", "key": "k0", "value": "x-0"},
        {"id": "1", "key": "k1", "value": "x-1"},
    ]
    typed = FileSource(str(tmp_path), csv_types={"id": float}).open_split("a.csv", None, CTX)
    assert [r["id"] for r in typed.read_batch(10)] == [0.0, 1.0]


def test_csv_value_that_does_not_convert_names_file_line_and_column(tmp_path):
    (tmp_path / "a.csv").write_text("id,name\n1,a\nx,b\n")
    reader = FileSource(str(tmp_path), csv_types={"id": int}).open_split("a.csv", None, CTX)
    with pytest.raises(MalformedFileError, match=r"line 3 of .*a\.csv.*'id'.*'x'"):
        reader.read_batch(10)


def test_invalid_json_line_names_file_and_offset(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\nnot json\n')
    reader = FileSource(str(tmp_path)).open_split("a.jsonl", None, CTX)
    with pytest.raises(MalformedFileError, match=r"a\.jsonl line 2 \(byte 9\): Expecting value"):
        reader.read_batch(10)


def test_line_numbers_stay_right_after_a_restored_offset(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n{"a": 2}\n\n{"a": 3}\n[1]\n')
    reader = FileSource(str(tmp_path)).open_split("a.jsonl", 9, CTX)  # after line 1
    with pytest.raises(MalformedFileError, match=r"line 5 \(byte 28\) .* is a JSON list"):
        reader.read_batch(10)


def test_json_files_are_read_as_json_lines_and_unknown_extensions_are_named(tmp_path, caplog):
    (tmp_path / "a.json").write_text('{"a": 1}\n')
    (tmp_path / "b.txt").write_text("x\n")
    assert FileSource(str(tmp_path), format="jsonl").splits() == ["a.json"]
    assert "skips b.txt" in caplog.text


def test_csv_files_with_different_headers_are_refused_naming_the_file(tmp_path):
    (tmp_path / "a.csv").write_text("id,value\n1,2\n")
    (tmp_path / "b.csv").write_text("id,amount\n1,2\n")
    with pytest.raises(MalformedFileError, match=r"b\.csv has the header \['id', 'amount'\]"):
        FileSource(str(tmp_path)).splits()


def test_splits_are_sorted_relative_paths_without_hidden_files(tmp_path):
    for name in [
        "b.jsonl",
        "a.jsonl",
        "sub/c.jsonl",
        "sub/A.jsonl",
        ".hidden.jsonl",
        "_tmp.jsonl",
        "_staging/x.jsonl",
        ".git/y.jsonl",
        "notes.txt",
        "d.csv",
    ]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(tmp_path / name, make_records(1, name))

    assert FileSource(str(tmp_path), format="jsonl").splits() == [
        "a.jsonl",
        "b.jsonl",
        "sub/A.jsonl",
        "sub/c.jsonl",
    ]
    assert FileSource(str(tmp_path)).splits() == [
        "a.jsonl",
        "b.jsonl",
        "d.csv",
        "sub/A.jsonl",
        "sub/c.jsonl",
    ]
    assert FileSource(str(tmp_path), pattern="sub/*.jsonl").splits() == [
        "sub/A.jsonl",
        "sub/c.jsonl",
    ]
    assert FileSource(str(tmp_path), format="jsonl", pattern="*.txt").splits() == ["notes.txt"]


def test_pattern_matching_a_file_of_unknown_format_without_format_is_an_error(tmp_path):
    (tmp_path / "notes.txt").write_text("{}\n")
    with pytest.raises(ConfigurationError, match=r"notes\.txt.*format="):
        FileSource(str(tmp_path), pattern="*.txt").splits()


def test_format_is_chosen_by_extension_when_not_given(tmp_path):
    expected = {}
    for name, fmt in [("a.jsonl", "jsonl"), ("b.csv", "csv"), ("c.parquet", "parquet")]:
        records = make_records(4, name)
        WRITERS[fmt](tmp_path / name, records)
        expected[name] = records
    source = FileSource(str(tmp_path), csv_types={"id": int})

    assert source.splits() == ["a.jsonl", "b.csv", "c.parquet"]
    for split in source.splits():
        assert read_all(source.open_split(split, None, CTX), 3) == expected[split]


def test_missing_directory_is_a_configuration_error_naming_it(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ConfigurationError, match=str(missing)):
        FileSource(str(missing))


def test_directory_removed_after_construction_fails_splits(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    source = FileSource(str(d))
    d.rmdir()
    with pytest.raises(ConfigurationError, match=str(d)):
        source.splits()


def test_unknown_format_is_a_configuration_error_naming_option_and_values(tmp_path):
    with pytest.raises(ConfigurationError, match=r"format='xml'.*'jsonl', 'csv', 'parquet'"):
        FileSource(str(tmp_path), format="xml")


def test_csv_types_with_another_format_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match="csv_types"):
        FileSource(str(tmp_path), format="jsonl", csv_types={"id": int})


@pytest.mark.parametrize("fmt", FORMATS)
def test_restore_of_a_removed_file_raises_restore_error_naming_it(tmp_path, fmt):
    source, _ = make_source(tmp_path, fmt, {f"sub/gone.{fmt}": N})
    reader = source.open_split(f"sub/gone.{fmt}", None, CTX)
    read_n(reader, 5)
    position = reader.position()
    reader.close()
    os.remove(tmp_path / "sub" / f"gone.{fmt}")

    with pytest.raises(RestoreError, match=rf"sub/gone\.{fmt}.*no longer exists"):
        source.open_split(f"sub/gone.{fmt}", position, CTX)


@pytest.mark.parametrize("fmt", FORMATS)
def test_restore_past_the_end_of_a_truncated_file_raises_restore_error(tmp_path, fmt):
    source, _ = make_source(tmp_path, fmt, {f"a.{fmt}": N})
    reader = source.open_split(f"a.{fmt}", None, CTX)
    read_n(reader, 10)
    position = reader.position()
    WRITERS[fmt](tmp_path / f"a.{fmt}", make_records(3, "short"))

    with pytest.raises(RestoreError, match=rf"a\.{fmt}.*truncated or replaced"):
        source.open_split(f"a.{fmt}", position, CTX)


def test_jsonl_restore_in_the_middle_of_a_line_raises_restore_error(tmp_path):
    source, _ = make_source(tmp_path, "jsonl", {"a.jsonl": 3})
    with pytest.raises(RestoreError, match="not the start of a line"):
        source.open_split("a.jsonl", 5, CTX)


@pytest.mark.parametrize("position", [-1, "3", 1.5, True])
def test_restore_with_a_foreign_position_raises_restore_error(tmp_path, position):
    source, _ = make_source(tmp_path, "jsonl", {"a.jsonl": 3})
    with pytest.raises(RestoreError, match="not a non-negative integer"):
        source.open_split("a.jsonl", position, CTX)


def test_split_id_outside_the_directory_is_rejected(tmp_path):
    source, _ = make_source(tmp_path, "jsonl", {"a.jsonl": 3})
    with pytest.raises(RestoreError, match="not a path inside"):
        source.open_split("../a.jsonl", 0, CTX)


def test_describe_names_directory_and_format(tmp_path):
    assert FileSource(str(tmp_path), format="jsonl").describe() == f"files({tmp_path}, jsonl)"
    assert FileSource(str(tmp_path)).describe() == f"files({tmp_path}, auto)"


def test_parquet_restore_skips_row_groups_before_the_position(tmp_path, monkeypatch):
    source, expected = make_source(tmp_path, "parquet", {"a.parquet": N})  # groups of 7 rows
    requested = []
    iter_batches = pq.ParquetFile.iter_batches

    def recording_iter_batches(self, *args, row_groups=None, **kwargs):
        requested.append(row_groups)
        return iter_batches(self, *args, row_groups=row_groups, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", recording_iter_batches)

    assert read_all(source.open_split("a.parquet", 15, CTX), 4) == expected["a.parquet"][15:]
    assert requested == [[2, 3]]
