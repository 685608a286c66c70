"""Schema changes under PostgresCdcSource (issue 37, item 3) on a real PostgreSQL: tables are
tracked by OID and Relation messages. Columns added, dropped or retyped are followed (while
streaming and across a restore); a rename, a move to another schema, a table replaced by a
copy, a changed tables= list or a table recreated while the job was stopped fail at once
naming the table and the change. Plus item 7's configuration checks: a column named like a
changelog field, a replica identity without the key, a missing table -- refused before the
job starts instead of spending its restarts."""

from __future__ import annotations

import logging
import threading
import time

import psycopg
import pytest
from cdc_pipelines import cdc_pipeline, dsn, items_database

from airflow_checkpoint_provider.engine import RestoreError
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.rows import CdcError
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.slots import CdcConfigurationError
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import PostgresCdcSource


@pytest.fixture
def db(postgres_server):
    yield from items_database(postgres_server, 20, 10)


def _ctx(name: str) -> SourceContext:
    return SourceContext("job", name, "cdc", 0, 1, 0)


def _sql(url, *statements):
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def _read(reader, n, timeout=20.0):
    out, deadline = [], time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(reader.read_batch(100) or [])
    return out


def _stream(db, name, **options):
    reader = PostgresCdcSource(db, ["items"], snapshot=False, **options).open_split(
        "stream", None, _ctx(name))
    reader.read_batch(10)  # connected
    return reader


@pytest.mark.timeout(60)
def test_columns_added_dropped_and_retyped_while_streaming_are_followed(db):
    reader = _stream(db, "cdc-columns")
    try:
        _sql(db, "ALTER TABLE items ADD COLUMN extra int DEFAULT 7",
             "INSERT INTO items (id, v, note, extra) VALUES (-1, 1, 'a', 8)")
        [rec] = _read(reader, 1)
        assert rec == {"id": -1, "v": 1, "note": "a", "extra": 8, "_op": "+I"}
        _sql(db, "ALTER TABLE items ALTER COLUMN v TYPE text USING v::text || 'x'",
             "UPDATE items SET note = 'b' WHERE id = -1")
        before, after = _read(reader, 2)
        assert after == {"id": -1, "v": "1x", "note": "b", "extra": 8, "_op": "+U"}
        assert before["_op"] == "-U" and before["id"] == -1
        _sql(db, "ALTER TABLE items DROP COLUMN note", "INSERT INTO items VALUES (-2, 'y', 9)")
        [rec] = _read(reader, 1)
        assert rec == {"id": -2, "v": "y", "extra": 9, "_op": "+I"}
    finally:
        reader.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ddl, change", [
    (["ALTER TABLE items RENAME TO items2", "INSERT INTO items2 VALUES (-1, 1, 'x')"],
     "'public.items' was renamed or moved to 'public.items2'"),
    (["CREATE SCHEMA other", "ALTER TABLE items SET SCHEMA other",
      "INSERT INTO other.items VALUES (-1, 1, 'x')"],
     "'public.items' was renamed or moved to 'other.items'"),
    (["ALTER TABLE items RENAME TO items_old", "CREATE TABLE items (LIKE items_old INCLUDING ALL)",
      "ALTER PUBLICATION {pub} ADD TABLE items", "INSERT INTO items VALUES (-1, 1, 'x')"],
     "'public.items' was replaced while captured"),
    (["ALTER TABLE items DROP CONSTRAINT items_pkey", "ALTER TABLE items ADD PRIMARY KEY (id, v)",
      "INSERT INTO items VALUES (-1, 1, 'x')"],
     "the primary key of table 'public.items' changed"),
], ids=["rename", "move", "swap", "primary-key"])
def test_a_renamed_moved_or_replaced_table_fails_at_once_naming_it(db, ddl, change):
    src = PostgresCdcSource(db, ["items"], snapshot=False)
    reader = _stream(db, "cdc-rename")
    try:
        _sql(db, *[s.format(pub=src.names("cdc-rename")[1]) for s in ddl])
        with pytest.raises(CdcError, match=change):
            _read(reader, 1)
    finally:
        reader.close()


@pytest.mark.timeout(60)
def test_a_column_added_while_stopped_is_followed_after_the_restore(db):
    reader = _stream(db, "cdc-stopped")
    try:
        _sql(db, "UPDATE items SET v = 100 WHERE id = 1")
        assert len(_read(reader, 2)) == 2
        position = reader.position()
    finally:
        reader.close()
    _sql(db, "UPDATE items SET v = 101 WHERE id = 2",
         "ALTER TABLE items ADD COLUMN extra int DEFAULT 7",
         "UPDATE items SET v = 102 WHERE id = 3")
    reader = PostgresCdcSource(db, ["items"], snapshot=False).open_split(
        "stream", position, _ctx("cdc-stopped"))
    try:
        recs = [r for r in _read(reader, 4) if r["_op"] == "+U"]
        assert recs == [{"id": 2, "v": 101, "note": "init", "_op": "+U"},
                        {"id": 3, "v": 102, "note": "init", "extra": 7, "_op": "+U"}]
    finally:
        reader.close()


@pytest.mark.timeout(60)
def test_tables_changed_or_recreated_across_a_restore_are_refused(db, tmp_path):
    store = MetadataStore(f"sqlite:///{tmp_path}/meta.db")
    reader = _stream(db, "cdc-restore-tables")
    position = reader.position()
    reader.close()
    _sql(db, "CREATE TABLE more (id int PRIMARY KEY)",
         f"ALTER PUBLICATION {position['publication']} ADD TABLE more")
    wider = PostgresCdcSource(db, ["items", "more"], snapshot=False)
    with pytest.raises(RestoreError, match=r"tables= changed across the restore \(added "
                       r"public.more"):
        wider.check_job_start(store, job_name="cdc-restore-tables", job_id="j2", fenced=False,
                              restored={"stream": position})
    _sql(db, "ALTER TABLE items RENAME TO items_old",
         "CREATE TABLE items (LIKE items_old INCLUDING ALL)")
    same = PostgresCdcSource(db, ["items"], snapshot=False)
    with pytest.raises(RestoreError, match="table 'public.items' was replaced while the job "
                       "was stopped"):
        same.check_job_start(store, job_name="cdc-restore-tables", job_id="j2", fenced=False,
                             restored={"stream": position})
    store.close()


@pytest.mark.timeout(60)
def test_configuration_errors_are_refused_before_the_job_starts(db, tmp_path):
    _sql(db, "CREATE TABLE clash (id int PRIMARY KEY, _op text)",
         "CREATE TABLE ident (id int PRIMARY KEY, u int NOT NULL UNIQUE)",
         "ALTER TABLE ident REPLICA IDENTITY USING INDEX ident_u_key")
    with pytest.raises(CdcConfigurationError, match="'public.clash' has column\\(s\\) _op"):
        PostgresCdcSource(db, ["clash"]).open_split("stream", None, _ctx("cdc-clash"))
    with pytest.raises(CdcConfigurationError, match="'public.ident' has REPLICA IDENTITY USING "
                       "INDEX on an index without the primary key"):
        PostgresCdcSource(db, ["ident"]).open_split("stream", None, _ctx("cdc-ident"))
    # a missing table fails the job at start (on main: every restart was spent on it)
    t0 = time.monotonic()
    with pytest.raises(CdcConfigurationError, match="'public.missing' does not exist"):
        cdc_pipeline(str(tmp_path), db, name="cdc-missing", tables=("missing",)).run()
    assert time.monotonic() - t0 < 30


@pytest.mark.timeout(60)
def test_a_dangling_prepared_transaction_is_named_while_the_slot_waits(db, caplog):
    with psycopg.connect(dsn(db), autocommit=True) as conn:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO items VALUES (-5, 0, 'prepared')")
        conn.execute("PREPARE TRANSACTION 'ckpt_dangling'")
    caplog.set_level(logging.WARNING)
    out: dict = {}

    def create():
        try:
            out["reader"] = PostgresCdcSource(db, ["items"], snapshot=False).open_split(
                "stream", None, _ctx("cdc-dangling"))
        except BaseException as exc:  # noqa: BLE001
            out["error"] = exc

    t = threading.Thread(target=create, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 20
        while "ckpt_dangling" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "prepared transaction gid 'ckpt_dangling'" in caplog.text, caplog.text
    finally:
        _sql(db, "COMMIT PREPARED 'ckpt_dangling'")
        t.join(30)
        if "reader" in out:
            out["reader"].close()
    assert "error" not in out, out
