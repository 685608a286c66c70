"""The typed ``_metadata`` document and the typed acks it is built of (issue 53, item 2):
the coordinator writes, byte for byte, the document it wrote before the types (the stored
fixture ``tests/support/fixtures/metadata_v1``, every kind of handle), and that document
round-trips through :class:`SnapshotMetadata`."""

import json
import os

import pytest
from repo_paths import SUPPORT_DIR

from airflow_checkpoint_provider.engine.checkpoint.coordinator import operator_state_sizes
from airflow_checkpoint_provider.engine.checkpoint.outcomes import (
    AckMetrics,
    OperatorAck,
    TaskAck,
)
from airflow_checkpoint_provider.engine.errors import CorruptCheckpointError
from airflow_checkpoint_provider.engine.snapshot.codec import (
    encode_metadata,
    load_snapshot,
    signature_status,
)
from airflow_checkpoint_provider.engine.snapshot.handles import (
    ChannelStateHandle,
    HeapChangelogHandle,
    RocksDBHandle,
    SnapshotMetadata,
    StateFileHandle,
)

FIXTURE = str(SUPPORT_DIR / "fixtures" / "metadata_v1")


@pytest.fixture(autouse=True)
def _unsigned(monkeypatch):
    monkeypatch.delenv("CKPT_SNAPSHOT_HMAC_KEY", raising=False)


def stored() -> bytes:
    with open(os.path.join(FIXTURE, "_metadata"), "rb") as f:
        return f.read()


def test_the_coordinator_writes_the_same_metadata_bytes_as_before_the_typed_document(tmp_path):
    from fixtures.metadata_v1.make import write

    data, stats = write(str(tmp_path), TaskAck.from_wire)
    assert data == stored()
    with open(os.path.join(FIXTURE, "task_stats.json")) as f:
        assert stats == json.load(f)


def test_a_stored_document_round_trips_through_snapshot_metadata():
    doc = json.loads(stored())
    meta = SnapshotMetadata.from_dict(doc, location="fixture")
    body = {k: v for k, v in doc.items() if k not in ("format", "version", "checksum")}
    assert meta.to_dict() == body
    assert encode_metadata(meta.to_dict()) == stored()


def test_the_stored_document_decodes_every_handle_kind():
    meta = load_snapshot(FIXTURE).metadata
    kinds = {uid: type(op.subtasks[0].keyed) for uid, op in meta.operators.items()}
    assert kinds == {"agg": StateFileHandle, "win": StateFileHandle, "rdb": RocksDBHandle,
                     "chg": HeapChangelogHandle, "src": type(None)}
    src = meta.operators["src"].subtasks
    assert [s.index for s in src] == [0, 1]
    assert isinstance(src[0].channel_state, ChannelStateHandle) and src[0].finished
    assert src[1].channel_state is None and not src[1].finished
    sizes = {r["operator_uid"]: r["state_bytes"] for r in operator_state_sizes(meta)}
    assert sizes == {"agg": 12, "win": 99, "rdb": 916, "chg": 38}


def test_an_ack_is_decoded_into_typed_operator_snapshots_and_metrics():
    ack = TaskAck.from_wire(
        {"op": {"operator_state": [["p", 1]], "states": {"s": {"kind": "value"}},
                "key_group_range": [0, 9],
                "keyed": {"path": "op-0.state", "size": 4, "sha256": "a" * 64,
                          "offsets": {"2": [0, 4]}}}},
        {"state_size": 4, "checkpointed_size": 4, "finished": True, "watermark": 7,
         "records": {"op": [1, 1]}, "sync_ms": 0.5})
    op = ack.operators["op"]
    assert isinstance(op, OperatorAck)
    assert op.keyed == StateFileHandle("op-0.state", 4, "a" * 64, "heap", ((2, 0, 4),))
    assert op.key_group_range == (0, 9) and op.operator_state == (["p", 1],)
    assert ack.metrics == AckMetrics(
        state_size=4, checkpointed_size=4, finished=True, records={"op": [1, 1]}, watermark=7,
        reported={"state_size": 4, "checkpointed_size": 4, "finished": True, "watermark": 7,
                  "records": {"op": [1, 1]}, "sync_ms": 0.5})


@pytest.mark.parametrize("operators, field", [
    ({"op": {"keyed": {"path": "../escape", "size": 1, "sha256": "a" * 64}}},
     "operators['op'].keyed.path"),
    ({"op": {"keyed": {"type": "rocksdb", "key_group_range": [0, 1], "files": [
        {"name": "x.sst", "shared": "/etc/passwd", "size": 1, "sha256": "a" * 64}]}}},
     "operators['op'].keyed.files[0].shared"),
    ({"op": {"key_group_range": [0]}}, "operators['op'].key_group_range"),
    ({"op": "not a mapping"}, "operators['op']"),
])
def test_a_malformed_ack_is_refused_naming_the_field(operators, field):
    with pytest.raises(CorruptCheckpointError, match=field.replace("[", r"\[")):
        TaskAck.from_wire(operators, {}, location="chk-1")


def test_negative_sizes_in_ack_metrics_are_refused():
    with pytest.raises(CorruptCheckpointError, match="metrics.state_size"):
        AckMetrics.from_wire({"state_size": -1}, location="chk-1")


def test_a_signed_document_is_the_same_whether_written_from_the_typed_or_the_stored_form(
        tmp_path):
    doc = json.loads(stored())
    body = {k: v for k, v in doc.items() if k not in ("format", "version", "checksum")}
    typed = SnapshotMetadata.from_dict(doc, location="fixture").to_dict()
    key = b"k" * 32
    signed = encode_metadata(typed, hmac_key=key)
    assert signed == encode_metadata(body, hmac_key=key)
    (tmp_path / "_metadata").write_bytes(signed)
    loaded = load_snapshot(str(tmp_path), hmac_key=key)  # checks the HMAC
    assert signature_status(loaded.doc, key) == "valid"
    assert signature_status(loaded.doc, b"x" * 32) == "invalid"
