"""Snapshots are signed by default with a key created once per metadata DB (issue 25 item 5).

Without ``$CKPT_SNAPSHOT_HMAC_KEY`` a snapshot-store writer used to make a job restore any
state it wrote (and claim to be another job's snapshot). Now every ``_metadata`` a job writes
carries an HMAC under its metadata DB's key, and a restore refuses a snapshot without a valid
one (:class:`UntrustedSnapshotError`) unless the trust flag is given, or the snapshot was
recorded COMPLETED in this DB before the key existed (the upgrade transition).

Real jobs (local runner, slot processes); key creation races with real processes on SQLite
and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import shutil

import pytest
from click.testing import CliRunner
from pipelines import (
    Background,
    check_exactly_once,
    expected_running_sums,
    running_sum_pipeline,
    versioned_pipeline,
)
from sqlalchemy import text

from airflow_checkpoint_provider.engine import UntrustedSnapshotError
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.cli import main as ckpt
from airflow_checkpoint_provider.engine.snapshot.codec import (
    encode_metadata,
    load_snapshot,
    signature_status,
)

pytestmark = pytest.mark.slow
N = 4_000


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch):
    monkeypatch.delenv("CKPT_SNAPSHOT_HMAC_KEY", raising=False)


def db_key(pipeline) -> bytes:
    with MetadataStore(pipeline.metadata_url) as store:
        return store.snapshot_key().key


def status_of(location: str, key: bytes) -> str:
    return signature_status(load_snapshot(location, check_hmac=False).doc, key)


def out_files(out) -> dict[str, bytes]:
    if not os.path.isdir(out):
        return {}
    return {n: open(os.path.join(out, n), "rb").read() for n in sorted(os.listdir(out))
            if os.path.isfile(os.path.join(out, n))}


def unsign(directory: str) -> None:
    """What an engine before signing wrote (and an attacker writes): no ``hmac``."""
    snap = load_snapshot(directory, check_hmac=False)
    doc = {k: v for k, v in snap.doc.items() if k != "hmac"}
    with open(os.path.join(directory, "_metadata"), "wb") as f:
        f.write(encode_metadata(doc))


def tamper_state(directory: str, *, keep_hmac: bool) -> None:
    """The attacker's edit of keyed state: one state file's bytes changed, its size and
    SHA-256 in ``_metadata`` recomputed, the checksum recomputed; the old ``hmac`` kept (it
    no longer matches) or dropped."""
    meta = os.path.join(directory, "_metadata")
    doc = json.load(open(meta))
    for op in doc["operators"].values():
        for sub in op["subtasks"]:
            keyed = sub.get("keyed")
            if keyed and keyed.get("path"):
                path = os.path.join(directory, keyed["path"])
                data = open(path, "rb").read() + b"\x00"
                open(path, "wb").write(data)
                keyed["size"], keyed["sha256"] = len(data), hashlib.sha256(data).hexdigest()
                signature = doc.get("hmac")
                body = {k: v for k, v in doc.items() if k not in ("checksum", "hmac")}
                body.update(format=doc["format"], version=doc["version"])
                if keep_hmac:
                    body["hmac"] = signature
                canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
                body["checksum"] = hashlib.sha256(canonical).hexdigest()
                open(meta, "w").write(json.dumps(body, sort_keys=True, indent=1))
                return
    raise AssertionError("no keyed state file to tamper with")


@pytest.fixture(scope="module")
def savepoint_a(tmp_path_factory):
    """A savepoint (and the job's checkpoints) taken in metadata DB A: ``(root, location)``."""
    root = tmp_path_factory.mktemp("dba")
    # 10 s of input: still running when the stop request is claimed on a loaded machine
    bg = Background(versioned_pipeline(str(root), "v1", num_records=20_000, rate=2000))
    job = bg.wait_running(min_checkpoints=2)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    return root, req.result["location"], job.job_id


@pytest.mark.timeout(240)
def test_checkpoints_and_savepoints_carry_an_hmac_under_the_db_key(savepoint_a, caplog):
    root, savepoint, job_id = savepoint_a
    p = versioned_pipeline(str(root), "v1")
    key = db_key(p)
    assert len(key) == 32
    with MetadataStore(p.metadata_url) as store:
        done = [c for c in store.list_checkpoints(job_id) if c.status == "COMPLETED"]
        assert {c.kind for c in done} == {"CHECKPOINT", "SAVEPOINT"}
        for c in done:
            assert status_of(c.location, key) == "valid", c.location
        assert "key=" not in repr(store.snapshot_key())
    assert status_of(savepoint, b"another key") == "invalid"
    # the key is nowhere in what ckpt prints or the snapshot holds
    for args in (["inspect", savepoint], ["jobs", "--db", p.metadata_url],
                 ["checkpoints", job_id, "--db", p.metadata_url],
                 ["inspect", savepoint, "--db", p.metadata_url, "--json"]):
        res = CliRunner().invoke(ckpt, args)
        assert key.hex() not in res.output and repr(key) not in res.output
    # read-only tools read any snapshot; inspect says whether this DB's key signed it
    res = CliRunner().invoke(ckpt, ["inspect", savepoint, "--db", p.metadata_url])
    assert res.exit_code == 0 and "signed with this deployment's key: yes" in res.output
    res = CliRunner().invoke(ckpt, ["inspect", savepoint])
    assert res.exit_code == 0 and "signed with this deployment's key: unknown" in res.output
    blob = open(os.path.join(savepoint, "_metadata")).read()
    assert key.hex() not in blob
    assert key.hex() not in caplog.text


@pytest.mark.timeout(300)
@pytest.mark.parametrize("attack", ["unsigned", "tampered-unsigned", "tampered-old-hmac"])
def test_a_crafted_snapshot_is_refused_and_nothing_is_committed(workdir, attack):
    """A job's own final checkpoint, edited as a store writer would: refused by default (the
    job row FAILED, no output file added or changed); restores with the trust flag."""
    p = running_sum_pipeline(str(workdir), num_records=N, interval_ms=None)
    first = p.run()
    assert first.status == "FINISHED"
    crafted = str(workdir / "crafted")
    shutil.copytree(first.latest_checkpoint, crafted)
    if attack == "unsigned":
        unsign(crafted)
    else:
        tamper_state(crafted, keep_hmac=attack == "tampered-old-hmac")
    before = out_files(workdir / "out")
    with pytest.raises(UntrustedSnapshotError, match=r"untrusted.*trust_snapshot=True"):
        p.run(restore=crafted, job_id="refused")
    assert out_files(workdir / "out") == before
    with MetadataStore(p.metadata_url) as store:
        assert store.get_job("refused").status == "FAILED"
        assert store.list_attempts("refused") == []
    trusted = p.run(restore=crafted, trust_snapshot=True)
    assert trusted.status == "FINISHED" and trusted.restored_from == crafted


@pytest.mark.timeout(300)
def test_a_savepoint_of_db_a_restores_in_db_b_only_with_the_trust_flag(savepoint_a, tmp_path):
    root_a, savepoint, _ = savepoint_a
    out = tmp_path / "out"
    shutil.copytree(root_a / "out", out)
    p = versioned_pipeline(str(tmp_path), "v1", num_records=20_000, out=str(out))
    with pytest.raises(UntrustedSnapshotError, match="signed with another key"):
        p.run(restore=savepoint)
    assert p.run(restore=savepoint, trust_snapshot=True).status == "FINISHED"
    check_exactly_once(str(out), expected_running_sums(20_000, 50, 7))
    # the job of DB B signed its own snapshots with B's key, not A's
    with MetadataStore(p.metadata_url) as store:
        own = store.completed_checkpoints(job_name="versioned", kind=None)
    assert own and all(status_of(c.location, db_key(p)) == "valid" for c in own)
    assert status_of(own[0].location, db_key(versioned_pipeline(str(root_a), "v1"))) == "invalid"


@pytest.mark.timeout(300)
def test_unsigned_checkpoint_recorded_before_the_key_existed_restores_latest(workdir, caplog):
    """The upgrade: a DB whose checkpoints an engine before signing wrote (unsigned, key
    table empty). ``restore="latest"`` and the recorded path restore them; an unsigned copy
    elsewhere, or one completed after the key existed, is refused."""
    p = running_sum_pipeline(str(workdir), num_records=N, interval_ms=None)
    first = p.run()
    unsign(first.latest_checkpoint)
    with MetadataStore(p.metadata_url) as store:  # as right after the schema upgrade
        with store.engine.begin() as conn:
            conn.execute(text("DELETE FROM snapshot_keys"))
    caplog.set_level(logging.WARNING)
    second = p.run(restore="latest")
    assert second.status == "FINISHED" and second.restored_from == first.latest_checkpoint
    assert "recorded COMPLETED in this metadata DB before its snapshot key" in caplog.text
    check_exactly_once(str(workdir / "out"), expected_running_sums(N, 50, 7))
    assert status_of(second.latest_checkpoint, db_key(p)) == "valid"
    # the recorded location by path: accepted; a copy elsewhere: refused
    assert p.run(restore=first.latest_checkpoint).status == "FINISHED"
    copy = str(workdir / "copy")
    shutil.copytree(first.latest_checkpoint, copy)
    with pytest.raises(UntrustedSnapshotError, match="not signed"):
        p.run(restore=copy)
    # unsigned after the key existed (the second job's checkpoint): refused
    unsign(second.latest_checkpoint)
    with pytest.raises(UntrustedSnapshotError, match="not signed"):
        p.run(restore=second.latest_checkpoint)
    check_exactly_once(str(workdir / "out"), expected_running_sums(N, 50, 7))


def _create_key(url: str, barrier, queue) -> None:
    store = MetadataStore(url)
    barrier.wait(timeout=60)
    key = store.snapshot_key()
    queue.put((key.key.hex(), key.created_at.isoformat()))
    store.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_processes_create_one_key(workdir, backend, request):
    if backend == "sqlite":
        url = f"sqlite:///{workdir}/meta.db"
    else:
        url = request.getfixturevalue("postgres_server").create_database()
    MetadataStore(url).close()  # schema first; the race is the key's
    # fresh processes, forked from a server that imported this module once (a spawned
    # process imported it again each: ~1 CPU second apiece); each opens its own store
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    n = 6
    barrier, queue = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_create_key, args=(url, barrier, queue)) for _ in range(n)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=120) for _ in range(n)]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert len(set(results)) == 1, results
    with MetadataStore(url) as store:
        assert store.snapshot_key().key.hex() == results[0][0]
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM snapshot_keys")).scalar() == 1


@pytest.mark.timeout(300)
def test_state_write_signs_with_db_or_says_the_trust_flag_is_needed(savepoint_a, tmp_path):
    root, savepoint, _ = savepoint_a
    db = versioned_pipeline(str(root), "v1").metadata_url
    runner = CliRunner()
    res = runner.invoke(ckpt, ["state", "write", "--from", savepoint, "--uid", "sum",
                               "--drop-key", "k1", "--output", str(tmp_path / "unsigned")])
    assert res.exit_code == 0, res.output
    assert "unsigned" in res.output and "--trust-snapshot" in res.output
    assert status_of(str(tmp_path / "unsigned"), db_key(versioned_pipeline(str(root), "v1"))) \
        == "unsigned"
    res = runner.invoke(ckpt, ["state", "write", "--from", savepoint, "--uid", "sum",
                               "--drop-key", "k1", "--output", str(tmp_path / "signed"),
                               "--db", db])
    assert res.exit_code == 0, res.output
    assert "signed with the metadata DB's snapshot key" in res.output
    assert status_of(str(tmp_path / "signed"), db_key(versioned_pipeline(str(root), "v1"))) \
        == "valid"
    # --db does not launder an untrusted source: it must be signed by that DB, or trusted
    res = runner.invoke(ckpt, ["state", "write", "--from", str(tmp_path / "unsigned"),
                               "--uid", "sum", "--output", str(tmp_path / "laundered"),
                               "--db", db])
    assert res.exit_code != 0 and "untrusted" in res.output
    assert not os.path.exists(tmp_path / "laundered" / "_metadata")
