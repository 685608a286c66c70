"""A ``+U`` without one of the table's columns writes null there (README: upserted rows carry
every column, no partial updates) -- Delta's ``MERGE ... update_all`` used to set only the
source's columns and keep the old value, unlike Iceberg and a new key's insert."""

from __future__ import annotations

import uuid

import pytest

from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink
from airflow_checkpoint_provider.engine.connectors.lakehouse.iceberg import IcebergSink


def _delta(tmp_path):
    from deltalake import DeltaTable

    sink = DeltaSink(str(tmp_path / "t"), mode="upsert", key=["k"])
    return sink, lambda: DeltaTable(sink.table_uri).to_pyarrow_table().to_pylist()


def _iceberg(tmp_path):
    from pyiceberg.catalog import load_catalog

    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
               "warehouse": f"file://{tmp_path}/wh"}
    sink = IcebergSink("db.t", catalog=catalog, mode="upsert", key=["k"])
    return sink, lambda: load_catalog("db", **catalog).load_table("db.t").scan().to_arrow().to_pylist()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("make", [_delta, _iceberg], ids=["delta", "iceberg"])
def test_an_update_without_a_column_writes_null_there(tmp_path, make):
    sink, rows = make(tmp_path)
    w = sink.create_writer(SourceContext(uuid.uuid4().hex, "j", "out", 0, 1, 0))
    w.recover([])
    w.write([{"_op": "+I", "k": 1, "v": "a", "n": 1}, {"_op": "+I", "k": 2, "v": "b", "n": 2}])
    w.commit(w.pre_commit(1))
    w.write([{"_op": "+U", "k": 1, "n": 10}, {"_op": "+U", "k": 3, "n": 3}])
    w.commit(w.pre_commit(2))
    assert sorted(rows(), key=lambda r: r["k"]) == [
        {"k": 1, "v": None, "n": 10}, {"k": 2, "v": "b", "n": 2}, {"k": 3, "v": None, "n": 3}]
    w.close()
