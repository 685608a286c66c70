"""S3FileSystem against a real S3-compatible server (moto_server on 127.0.0.1)."""

import os

import boto3
import pytest

from airflow_checkpoint_provider.engine.checkpoint.outcomes import TaskAck
from airflow_checkpoint_provider.engine.datastream.api import default_metadata_url
from airflow_checkpoint_provider.engine.errors import CheckpointStorageError, RestoreError
from airflow_checkpoint_provider.engine.fs import storage
from airflow_checkpoint_provider.engine.fs.s3 import MIB, S3FileSystem, split_uri
from airflow_checkpoint_provider.engine.snapshot.codec import (
    encode_metadata,
    load_snapshot,
    read_state_file,
)


@pytest.fixture
def raw(s3_server):
    return boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def test_split_uri_and_location_helpers_use_posix_paths_for_s3():
    assert split_uri("s3://b/a/b/") == ("b", "a/b")
    assert split_uri("s3://b") == ("b", "")
    assert storage.join("s3://b/p/", "job", "chk-1") == "s3://b/p/job/chk-1"
    assert storage.job_directory("s3://b/p/", "orders", "abc") == "s3://b/p/orders/abc"
    assert storage.parent("s3://b/p/chk-1/_metadata") == "s3://b/p/chk-1"
    assert storage.basename("s3://b/p/chk-1/_metadata") == "_metadata"
    assert storage.absolute_location("s3://b//p/") == "s3://b/p"
    assert storage.savepoint_directory("s3://b/sp", "abcdef123", 7) == "s3://b/sp/savepoint-abcdef123-7"
    assert storage.default_savepoint_root("s3://b/ckpt") == "s3://b/ckpt/savepoints"
    assert storage.default_savepoint_root("rel") == os.path.abspath("rel/savepoints")
    assert isinstance(storage.filesystem_for("s3://b/p"), S3FileSystem)
    assert isinstance(storage.filesystem_for("/tmp/x"), storage.LocalFileSystem)
    with pytest.raises(CheckpointStorageError, match="gs"):
        storage.filesystem_for("gs://b/p")


def test_default_metadata_db_for_s3_checkpoints_is_in_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("CKPT_METADATA_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_metadata_url("s3://b/ckpt") == f"sqlite:///{tmp_path}/checkpoints/metadata.db"
    assert default_metadata_url("data") == f"sqlite:///{tmp_path}/data/metadata.db"


def test_write_read_exists_list_and_remove(s3_bucket):
    fs = S3FileSystem()
    root = f"s3://{s3_bucket}/ckpt/job/abc"
    fs.write_bytes(storage.join(root, "chk-1", "a.state"), b"one")
    fs.write_bytes(storage.join(root, "chk-1", "sub", "b.state"), b"two")
    fs.write_bytes(storage.join(root, "chk-10", "c.state"), b"three")
    fs.write_bytes(storage.join(root, "chk-1", "_metadata"), b"{}", atomic=True)

    assert fs.read_bytes(storage.join(root, "chk-1", "sub", "b.state")) == b"two"
    assert fs.exists(storage.join(root, "chk-1", "a.state"))
    assert fs.exists(storage.join(root, "chk-1"))          # a prefix with objects
    assert fs.is_dir(storage.join(root, "chk-1"))
    assert not fs.is_dir(storage.join(root, "chk-1", "a.state"))
    assert not fs.exists(storage.join(root, "chk-2"))
    assert fs.list_files(storage.join(root, "chk-1")) == ["_metadata", "a.state", "sub/b.state"]

    fs.remove_file(storage.join(root, "chk-1", "a.state"))
    fs.remove_file(storage.join(root, "chk-1", "a.state"))  # missing: no error
    assert fs.list_files(storage.join(root, "chk-1")) == ["_metadata", "sub/b.state"]

    fs.remove_tree(storage.join(root, "chk-1"))             # not chk-10 (same key prefix)
    assert fs.list_files(root) == ["chk-10/c.state"]
    fs.remove_tree(storage.join(root, "chk-1"))             # already gone: no error


def test_remove_tree_pages_through_listings_and_deletes_in_batches(s3_bucket, raw, monkeypatch):
    from airflow_checkpoint_provider.engine.fs import s3

    # small pages and batches stand in for S3's 1000-key limits (fewer requests to moto)
    monkeypatch.setattr(s3, "LIST_PAGE_SIZE", 7)
    monkeypatch.setattr(s3, "DELETE_BATCH", 10)
    calls = []
    fs = S3FileSystem()
    real_delete = fs.client.delete_objects
    monkeypatch.setattr(fs.client, "delete_objects",
                        lambda **kw: calls.append(len(kw["Delete"]["Objects"])) or real_delete(**kw))
    for i in range(25):
        raw.put_object(Bucket=s3_bucket, Key=f"p/chk-1/f{i}", Body=b"x")
    raw.put_object(Bucket=s3_bucket, Key="p/keep", Body=b"x")
    assert len(fs.list_files(f"s3://{s3_bucket}/p/chk-1")) == 25
    fs.remove_tree(f"s3://{s3_bucket}/p/chk-1")
    assert calls == [10, 10, 5]
    keys = [o["Key"] for o in raw.list_objects_v2(Bucket=s3_bucket).get("Contents", [])]
    assert keys == ["p/keep"]


def test_large_file_is_uploaded_in_parts(s3_bucket, raw):
    fs = S3FileSystem(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    data = os.urandom(11 * MIB)  # 3 parts: 5 + 5 + 1 MiB
    path = f"s3://{s3_bucket}/ckpt/big.state"
    fs.write_bytes(path, data)
    head = raw.head_object(Bucket=s3_bucket, Key="ckpt/big.state")
    assert head["ETag"].strip('"').endswith("-3")  # the ETag of a 3-part upload
    assert fs.read_bytes(path) == data

    small = f"s3://{s3_bucket}/ckpt/small.state"
    fs.write_bytes(small, b"x" * 1000)
    assert "-" not in raw.head_object(Bucket=s3_bucket, Key="ckpt/small.state")["ETag"]


def test_errors_name_the_s3_uri(s3_bucket):
    fs = S3FileSystem()
    missing = f"s3://{s3_bucket}/ckpt/chk-3/nothing.state"
    with pytest.raises(CheckpointStorageError, match=f"{missing} does not exist"):
        fs.read_bytes(missing)
    with pytest.raises(CheckpointStorageError, match="s3://no-such-bucket-xyz/k"):
        fs.write_bytes("s3://no-such-bucket-xyz/k", b"x")


def test_unreachable_endpoint_fails_within_seconds_naming_the_uri(s3_bucket, monkeypatch):
    from s3_server import free_port

    monkeypatch.setenv("CKPT_S3_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("CKPT_S3_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("CKPT_S3_TIMEOUT_S", "1")
    path = f"s3://{s3_bucket}/ckpt/a.state"
    with pytest.raises(CheckpointStorageError, match=f"cannot write checkpoint file {path}"):
        S3FileSystem().write_bytes(path, b"x")
    S3FileSystem().remove_tree(f"s3://{s3_bucket}/ckpt")  # best effort: logs, never raises


def test_load_snapshot_and_state_files_from_s3(s3_bucket):
    fs = S3FileSystem()
    chk = f"s3://{s3_bucket}/ckpt/job/abc/chk-4"
    data = b"state bytes"
    fs.write_bytes(storage.join(chk, "op-0.state"), data)
    doc = {"job_id": "abc", "job_name": "job", "checkpoint_id": 4, "kind": "CHECKPOINT",
           "timestamp_ms": 1, "operators": {}}
    fs.write_bytes(storage.join(chk, "_metadata"), encode_metadata(doc), atomic=True)
    for path in (chk, chk + "/", storage.join(chk, "_metadata")):
        snap = load_snapshot(path)
        assert snap.directory == chk and snap.checkpoint_id == 4
    handle = {"path": "op-0.state", "size": len(data), "sha256": storage.sha256(data)}
    assert read_state_file(chk, handle) == data
    with pytest.raises(RestoreError, match="does not exist"):
        load_snapshot(f"s3://{s3_bucket}/ckpt/job/abc/chk-5")
    with pytest.raises(RestoreError, match="no _metadata"):
        fs.write_bytes(f"s3://{s3_bucket}/ckpt/job/abc/chk-6/x.state", b"x")
        load_snapshot(f"s3://{s3_bucket}/ckpt/job/abc/chk-6")


def test_coordinator_fails_a_checkpoint_whose_metadata_cannot_be_written_and_goes_on(
        s3_bucket, s3_server, monkeypatch):
    from s3_server import free_port

    from airflow_checkpoint_provider.engine import CheckpointConfig
    from airflow_checkpoint_provider.engine.checkpoint.coordinator import CheckpointCoordinator

    tasks = [(0, 0), (1, 0)]
    aborts, notifies = [], []
    c = CheckpointCoordinator(
        job_id="job1", job_name="j", job_dir=f"s3://{s3_bucket}/ckpt/j/job1",
        config=CheckpointConfig(interval_ms=100, initial_delay_ms=0, tolerable_failures=None),
        tasks=tasks, operator_info={"op": {"kind": "operator", "parallelism": 2,
                                           "max_parallelism": 128}},
        send_trigger=lambda *a: None, send_notify=notifies.append, send_abort=aborts.append)
    c.set_tasks_running(set(tasks))
    ack = TaskAck.from_wire({"op": {"operator_state": [1]}})

    # S3 is unreachable when the last ack arrives: _metadata cannot be written
    monkeypatch.setenv("CKPT_S3_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("CKPT_S3_MAX_ATTEMPTS", "1")
    assert c.trigger(0.0) == 1
    assert [c.receive_ack(1, t, ack, 0.1) for t in tasks] == [None, None]
    assert not c.pending and not c.completed and aborts == [1] and notifies == []
    assert c.num_failed == 1 and c.job_failure is None

    # S3 is back: the next checkpoint completes and is restorable
    monkeypatch.setenv("CKPT_S3_ENDPOINT_URL", s3_server.endpoint_url)
    assert c.trigger(1.0) == 2
    done = [c.receive_ack(2, t, ack, 1.1) for t in tasks][-1]
    assert done is not None and notifies == [2]
    assert done.location == f"s3://{s3_bucket}/ckpt/j/job1/chk-2"
    assert load_snapshot(done.location).checkpoint_id == 2
    c.cleaner.close()  # before the fixtures stop the S3 server
