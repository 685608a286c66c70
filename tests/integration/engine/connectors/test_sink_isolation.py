"""Jobs sharing a sink directory or table cannot reach each other's output (issue 25):

* item 4: ids that contain '-' used to give the same part file names / Delta application
  ids (job ``a-b`` + uid ``c`` vs job ``a`` + uid ``b-c``): rows were overwritten, or a
  Delta commit skipped as "already committed";
* item 5: a crafted snapshot (no HMAC key) replaced another job's part file, or committed
  under a foreign Delta/Iceberg application id at version 999999999 so that the victim's
  commits were all skipped. Each is refused now, and the victim's output is intact.

Each test runs real jobs (local runner, slot processes)."""

from __future__ import annotations

import collections
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from postgres_pipelines import PREPARED_HERE

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    CorruptCheckpointError,
    FileSink,
    GeneratorSource,
    JobFailedError,
    Pipeline,
    RestartStrategy,
    read_committed,
)
from airflow_checkpoint_provider.engine.snapshot.codec import encode_metadata, load_snapshot

pytestmark = pytest.mark.slow
N = 2_000
COLLIDING = [(("a-b", "c"), ("a", "b-c")), (("c", "a-b"), ("b-c", "a"))]
#: (the attacker job's own staged file, the victim's application id): old and new encoding
FORGED = [("out-attacker-a0-s0-c9-deadbeef.parquet", "ckpt-victim-out-0"),
          ("out~attacker~a0~s0~c9~deadbeef.parquet", "ckpt~victim~out~0")]


def pipeline(root, name: str, uid: str, sink, n: int = N, seed: int = 7) -> Pipeline:
    p = Pipeline(name, checkpoint=CheckpointConfig(interval_ms=100, directory=f"{root}/ckpt"),
                 restart_strategy=RestartStrategy.none(), metadata_url=f"sqlite:///{root}/meta.db")
    p.source(GeneratorSource(n, num_keys=10, seed=seed, splits=2), uid="gen").sink(sink, uid=uid)
    return p


def delta_sink(table):
    pytest.importorskip("deltalake")
    from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink

    return DeltaSink(str(table))


def delta_ids(table) -> list[int]:
    from deltalake import DeltaTable

    return DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()


def iceberg(root):
    pytest.importorskip("pyiceberg")
    from airflow_checkpoint_provider.engine.connectors.lakehouse.iceberg import IcebergSink

    catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/wh"}
    return IcebergSink("db.t", catalog=catalog)


def iceberg_ids(sink) -> list[int]:
    from pyiceberg.catalog import load_catalog

    table = load_catalog("db", **sink.catalog).load_table("db.t")
    return table.scan().to_arrow().column("id").to_pylist()


def exactly(ids, times: int) -> None:
    counts = collections.Counter(ids)
    assert set(counts) == set(range(N)) and set(counts.values()) == {times}, \
        f"{len(ids)} rows, {sum(1 for c in counts.values() if c != times)} ids not x{times}"


def craft(checkpoint: str, uid: str, transactions: list) -> str:
    """The attacker's edit: the sink's restored transactions replaced, the checksum
    recomputed, no HMAC. Such a snapshot is refused as untrusted by default
    (test_snapshot_signing.py); these tests restore it with the trust flag, as a user who
    vouches for a relocated savepoint would: the sinks must still refuse a transaction
    that is not this job's own."""
    snap = load_snapshot(checkpoint)
    doc = dict(snap.doc)
    sub = doc["operators"][uid]["subtasks"][0]
    sub["operator_state"] = [{"checkpoint_id": snap.checkpoint_id, "transactions": transactions}]
    with open(os.path.join(snap.directory, "_metadata"), "wb") as f:
        f.write(encode_metadata(doc))
    return snap.directory


# -- item 4: colliding ids --------------------------------------------------------------------

@pytest.mark.timeout(180)
@pytest.mark.parametrize("first, second", COLLIDING)
def test_jobs_with_colliding_ids_keep_every_file_row(workdir, first, second):
    out = workdir / "out"
    for i, (job, uid) in enumerate((first, second)):
        res = pipeline(workdir / f"j{i}", f"job{i}", uid, FileSink(str(out))).run(job_id=job)
        assert res.status == "FINISHED"
    exactly([r["id"] for r in read_committed(str(out))], 2)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("first, second", COLLIDING)
def test_jobs_with_colliding_ids_each_commit_every_delta_row(workdir, first, second):
    table = workdir / "t"
    for i, (job, uid) in enumerate((first, second)):
        res = pipeline(workdir / f"j{i}", f"job{i}", uid, delta_sink(table)).run(job_id=job)
        assert res.status == "FINISHED"
    exactly(delta_ids(table), 2)


# -- item 5: crafted snapshots ----------------------------------------------------------------

@pytest.mark.timeout(180)
def test_a_crafted_file_transaction_cannot_replace_another_jobs_part_file(workdir):
    out = workdir / "out"
    assert pipeline(workdir / "v", "victim", "out", FileSink(str(out))).run(
        job_id="victim").status == "FINISHED"
    before = {n: (out / n).read_bytes() for n in os.listdir(out) if n.startswith("part-")}
    attack = pipeline(workdir / "a", "attacker", "out", FileSink(str(out)), n=10)
    chk = attack.run(job_id="attacker").latest_checkpoint
    staged = out / "_staging" / "out~attacker~a0~s0~c9~deadbeef.inprogress"
    staged.write_text('{"id": -1}\n')  # one attacker row, staged as the attacker job would
    for target in sorted(before)[:2]:
        craft(chk, "out", [{"staging": staged.name, "final": target}])
        with pytest.raises(CorruptCheckpointError, match=r"transactions\[0\]\.final"):
            attack.run(restore=chk, job_id=f"attacker-{target[-9:-6]}", trust_snapshot=True)
    assert {n: (out / n).read_bytes() for n in before} == before
    assert staged.exists()


@pytest.mark.timeout(240)
def test_a_crafted_delta_transaction_cannot_poison_another_jobs_app_id(workdir):
    """The attacker commits under the victim's application id at version 999999999 before
    the victim runs (job ids can be predictable): the victim's commits must all land."""
    table = workdir / "t"
    attack = pipeline(workdir / "a", "attacker", "out", delta_sink(table), n=10)
    chk = attack.run(job_id="attacker").latest_checkpoint
    for i, (staged, app) in enumerate(FORGED):
        pq.write_table(pa.table({"id": [-1], "key": ["evil"], "value": [0]}),
                       str(table / "_ckpt_staging" / staged))
        craft(chk, "out", [{"staging": staged, "app_id": app, "version": 999_999_999}])
        with pytest.raises(CorruptCheckpointError, match=r"transactions\[0\]"):
            attack.run(restore=chk, job_id=f"attacker-{i}", trust_snapshot=True)
    assert pipeline(workdir / "v", "victim", "out", delta_sink(table)).run(
        job_id="victim").status == "FINISHED"
    ids = [i for i in delta_ids(table) if i >= 0]
    assert collections.Counter(ids) == collections.Counter(list(range(N)) + list(range(10)))


@pytest.mark.timeout(240)
def test_a_crafted_iceberg_transaction_cannot_poison_another_jobs_app_id(workdir):
    sink = iceberg(workdir)
    attack = pipeline(workdir / "a", "attacker", "out", sink, n=10)
    chk = attack.run(job_id="attacker").latest_checkpoint
    os.makedirs(sink.staging_dir, exist_ok=True)
    for i, (staged, app) in enumerate(FORGED):
        pq.write_table(pa.table({"id": [-1], "key": ["evil"], "value": [0]}),
                       os.path.join(sink.staging_dir, staged))
        craft(chk, "out", [{"staging": staged, "app_id": app, "version": 999_999_999}])
        with pytest.raises(CorruptCheckpointError, match=r"transactions\[0\]"):
            attack.run(restore=chk, job_id=f"attacker-{i}", trust_snapshot=True)
    assert pipeline(workdir / "v", "victim", "out", iceberg(workdir)).run(
        job_id="victim").status == "FINISHED"
    ids = [i for i in iceberg_ids(sink) if i >= 0]
    assert collections.Counter(ids) == collections.Counter(list(range(N)) + list(range(10)))


@pytest.mark.timeout(240)
def test_a_crafted_snapshot_cannot_commit_another_jobs_prepared_transaction(workdir,
                                                                            postgres_server):
    """The victim has a prepared (not yet committed) transaction; the attacker's snapshot
    lists it beside its own gid, or under another sink's uid: refused, still prepared."""
    psycopg = pytest.importorskip("psycopg")
    from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn
    from airflow_checkpoint_provider.engine.connectors.postgres.sink import (
        PostgresSink,
        _uid_hash,
    )

    url = postgres_server.create_database()
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id bigint, key text, value bigint)")
    h = _uid_hash("out")
    victim_gids = [f"ckpt-victim-{h}-0-5", f"ckpt~victim~{h}~0~6"]  # old and new encoding
    for i, g in enumerate(victim_gids):
        with psycopg.connect(libpq_dsn(url)) as conn:
            conn.execute("INSERT INTO t VALUES (%s, 'victim', 0)", (-1 - i,))
            conn.execute(f"PREPARE TRANSACTION '{g}'")
    sink = PostgresSink(url, "t", ["id", "key", "value"])
    attack = pipeline(workdir / "a", "attacker", "out", sink, n=10)
    chk = attack.run(job_id="attacker").latest_checkpoint
    forged = [[f"ckpt-attacker-{h}-0-1", victim_gids[0]],
              [f"ckpt~attacker~{h}~0~1", victim_gids[1]],
              [f"ckpt~victim~{_uid_hash('other')}~0~6"]]
    for i, txns in enumerate(forged):
        craft(chk, "out", txns)
        with pytest.raises((CorruptCheckpointError, JobFailedError), match="transaction"):
            attack.run(restore=chk, job_id=f"attacker-{i}", trust_snapshot=True)
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        prepared = {g for (g,) in conn.execute(PREPARED_HERE)}
        assert set(victim_gids) <= prepared
        assert conn.execute("SELECT count(*) FROM t WHERE key = 'victim'").fetchone()[0] == 0
        for g in victim_gids:
            conn.execute(f"ROLLBACK PREPARED '{g}'")
