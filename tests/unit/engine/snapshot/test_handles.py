"""Snapshots are untrusted input: typed handles refuse anything that leaves its directory,
the optional HMAC refuses an edited ``_metadata``, ``ckpt inspect --verify`` reads every file."""

import json
import os

import pytest
from click.testing import CliRunner

from airflow_checkpoint_provider.engine import CorruptCheckpointError, FileSink, SourceContext
from airflow_checkpoint_provider.engine.cli import main as ckpt
from airflow_checkpoint_provider.engine.fs.storage import sha256
from airflow_checkpoint_provider.engine.snapshot import (
    RocksDBHandle,
    SinkTransaction,
    StateFileHandle,
    safe_name,
    safe_relative_path,
)
from airflow_checkpoint_provider.engine.snapshot.codec import (
    _canonical,
    encode_metadata,
    load_snapshot,
    read_state_file,
)
from airflow_checkpoint_provider.engine.snapshot.integrity import ENV_KEY
from airflow_checkpoint_provider.engine.snapshot.verify import verify_snapshot

DIGEST = "0" * 64
BAD_NAMES = ["", ".", "..", "../x", "/etc/passwd", "a/b", "a\\b", "a\x00b", "x" * 256, 7, None]


@pytest.mark.parametrize("value", BAD_NAMES)
def test_a_path_from_a_snapshot_must_be_a_bare_name(value):
    with pytest.raises(CorruptCheckpointError, match=r"snapshot /chk-1: field f "):
        safe_name(value, field="f", location="/chk-1")


@pytest.mark.parametrize("value", ["../x", "/abs/x", "a/../b", "a\\b", "a//b", "c:/x", "a/\x00"])
def test_a_relative_path_from_a_snapshot_stays_inside(value):
    with pytest.raises(CorruptCheckpointError, match="field shared"):
        safe_relative_path(value, field="shared", location="/job")


def test_state_file_handle_validates_every_field():
    ok = {"path": "sum-0-ab.state", "size": 10, "sha256": DIGEST, "offsets": {"3": [0, 10]}}
    h = StateFileHandle.from_dict(ok, location="/c")
    assert (h.path, h.size, h.type, h.offsets) == ("sum-0-ab.state", 10, "heap", ((3, 0, 10),))
    assert StateFileHandle.from_dict(h.to_dict(), location="/c") == h
    for field, value in [("path", "../../x.state"), ("size", -1), ("size", True), ("size", "10"),
                         ("sha256", "xyz"), ("offsets", {"3": [5, 10]}), ("offsets", {"a": [0, 1]}),
                         ("type", "pickle")]:
        with pytest.raises(CorruptCheckpointError, match=f"field keyed.{field}"):
            StateFileHandle.from_dict({**ok, field: value}, location="/c")


def test_rocksdb_handle_refuses_names_and_shared_keys_outside_their_directories():
    f = {"name": "000012.sst", "shared": "shared/sum-abc-000012.sst", "size": 3, "sha256": DIGEST}
    h = RocksDBHandle.from_dict({"type": "rocksdb", "files": [f], "key_group_range": [0, 9]},
                                location="/job/chk-2")
    assert h.files[0].location_in("/job/chk-2") == "/job/shared/sum-abc-000012.sst"
    for bad in [{**f, "name": "../../.bashrc"}, {**f, "shared": "shared/../../x"},
                {**f, "shared": "other/x.sst"}, {**f, "shared": None, "path": "/tmp/x"}]:
        with pytest.raises(CorruptCheckpointError, match=r"keyed\.files\[0\]"):
            RocksDBHandle.from_dict({"type": "rocksdb", "files": [bad], "key_group_range": [0, 9]},
                                    location="/job/chk-2")


def _writer(directory):
    ctx = SourceContext("job12345abc", "j", "out", 0, 1, 1)
    return FileSink(str(directory)).create_writer(ctx)


@pytest.mark.parametrize("txn", [
    {"staging": "../../payload.inprogress", "final": "part-x.jsonl"},
    {"staging": "out-job12345-a0-s0-1.inprogress", "final": "../../site-packages/evil.pth"},
    {"staging": "out-job12345-a0-s0-1.inprogress", "final": "/tmp/evil.pth"},
    {"staging": "out-job12345-a0-s0-1.inprogress", "final": "evil.pth"},
    {"staging": "payload.py", "final": "part-x.jsonl"},
])
def test_crafted_file_sink_transaction_is_refused_and_nothing_is_moved(tmp_path, txn):
    out, site = tmp_path / "out", tmp_path / "site-packages"
    site.mkdir()
    writer = _writer(out)
    staged = out / "_staging" / "out-job12345-a0-s0-1.inprogress"
    staged.write_text("import os\n")
    payload = tmp_path / "payload.inprogress"
    payload.write_text("import os\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(CorruptCheckpointError, match=r"field transactions\[0\]\.(staging|final)"):
        writer.recover([txn])
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert os.listdir(site) == [] and staged.exists() and payload.exists()


def test_valid_file_sink_transaction_is_committed(tmp_path):
    writer = _writer(tmp_path / "out")
    writer.write([{"a": 1}])
    txns = writer.pre_commit(3)
    assert SinkTransaction.from_dict(txns[0], location="x").final.startswith("part-out~")
    writer.recover(txns)
    assert [n for n in os.listdir(tmp_path / "out") if n.startswith("part-")] == [txns[0]["final"]]


def _snapshot(directory, *, key=None, path="sum-0.state"):
    """A one-operator checkpoint directory with one heap state file."""
    os.makedirs(directory, exist_ok=True)
    data = b"0123456789"
    with open(os.path.join(directory, "sum-0.state"), "wb") as f:
        f.write(data)
    doc = {"job_id": "abc", "job_name": "j", "checkpoint_id": 4, "kind": "CHECKPOINT",
           "timestamp_ms": 1, "operators": {"sum": {
               "kind": "keyed", "parallelism": 1, "max_parallelism": 128, "states": {},
               "subtasks": [{"index": 0, "key_group_range": [0, 127], "operator_state": [],
                             "keyed": {"path": path, "size": 10, "sha256": sha256(data),
                                       "offsets": {"0": [0, 10]}}}]}}}
    with open(os.path.join(directory, "_metadata"), "wb") as f:
        f.write(encode_metadata(doc, hmac_key=key))
    return str(directory)


def _edit(directory, change):
    """Edit ``_metadata`` as an attacker would: change it and recompute the plain checksum."""
    meta = os.path.join(directory, "_metadata")
    with open(meta) as f:
        doc = json.load(f)
    change(doc)
    body = {k: v for k, v in doc.items() if k != "checksum"}
    doc["checksum"] = sha256(_canonical(body))
    with open(meta, "w") as f:
        json.dump(doc, f)


def test_traversal_in_metadata_is_refused_naming_the_field(tmp_path):
    chk = _snapshot(tmp_path / "chk-4", path="../../../etc/passwd")
    with pytest.raises(CorruptCheckpointError,
                       match=r"chk-4/_metadata: field operators\['sum'\]\.subtasks\[0\]\.keyed\.path"):
        load_snapshot(chk)
    with pytest.raises(CorruptCheckpointError, match="keyed.path"):
        read_state_file(str(tmp_path), {"path": "../x", "size": 1, "sha256": DIGEST})


def test_hmac_signed_snapshot_edited_and_rechecksummed_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_KEY, "s3cret")
    chk = _snapshot(tmp_path / "chk-4", key=None)   # signed through the environment
    assert load_snapshot(chk).checkpoint_id == 4
    _edit(chk, lambda d: d.update(job_name="other"))
    with pytest.raises(CorruptCheckpointError, match="fails its HMAC"):
        load_snapshot(chk)
    with pytest.raises(CorruptCheckpointError, match="fails its HMAC"):
        load_snapshot(chk, hmac_key="s3cret")
    # a swapped state file: the attacker rewrites its checksum in _metadata
    chk2 = _snapshot(tmp_path / "chk-5")
    _edit(chk2, lambda d: d["operators"]["sum"]["subtasks"][0]["keyed"].update(sha256=DIGEST))
    with pytest.raises(CorruptCheckpointError, match="fails its HMAC"):
        load_snapshot(chk2)
    # stripping the signature does not help while the key is configured
    chk3 = _snapshot(tmp_path / "chk-6")
    _edit(chk3, lambda d: d.pop("hmac"))
    with pytest.raises(CorruptCheckpointError, match="not signed"):
        load_snapshot(chk3)
    # another key
    with pytest.raises(CorruptCheckpointError, match="fails its HMAC"):
        load_snapshot(_snapshot(tmp_path / "chk-7"), hmac_key="other")


def test_without_a_key_signed_and_unsigned_snapshots_load(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_KEY, raising=False)
    assert load_snapshot(_snapshot(tmp_path / "a", key="k")).checkpoint_id == 4
    assert "hmac" not in load_snapshot(_snapshot(tmp_path / "b")).doc


def test_verify_names_a_flipped_or_missing_state_file(tmp_path):
    chk = _snapshot(tmp_path / "chk-4")
    assert verify_snapshot(load_snapshot(chk)) == 1
    state = os.path.join(chk, "sum-0.state")
    with open(state, "r+b") as f:
        f.write(b"X")
    with pytest.raises(CorruptCheckpointError, match="sum-0.state does not match its checksum"):
        verify_snapshot(load_snapshot(chk))
    os.remove(state)
    with pytest.raises(CorruptCheckpointError, match="sum-0.state listed in _metadata is missing"):
        verify_snapshot(load_snapshot(chk))


def test_ckpt_inspect_verify_exits_non_zero_on_a_flipped_byte(tmp_path):
    chk = _snapshot(tmp_path / "chk-4")
    ok = CliRunner().invoke(ckpt, ["inspect", "--verify", chk])
    assert ok.exit_code == 0 and "verified 1 state files" in ok.output
    with open(os.path.join(chk, "sum-0.state"), "r+b") as f:
        f.seek(5)
        f.write(b"!")
    assert CliRunner().invoke(ckpt, ["inspect", chk]).exit_code == 0   # _metadata alone is fine
    bad = CliRunner().invoke(ckpt, ["inspect", "--verify", chk])
    assert bad.exit_code != 0 and "sum-0.state does not match its checksum" in bad.output
