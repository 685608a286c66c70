"""The ``_metadata`` file: what a checkpoint or savepoint holds.

A JSON document (readable with any tool) with a SHA-256 over its canonical form::

    {"format": "airflow-checkpoint-provider/checkpoint", "version": 1,
     "job_id", "job_name", "checkpoint_id", "kind", "timestamp_ms",
     "operators": {
        "<uid>": {"max_parallelism": 128, "parallelism": 3, "kind": "keyed" | "operator",
                  "states": {"<state name>": {"kind": "value", "serializer": "msgpack"}},
                  "subtasks": [{"index": 0, "key_group_range": [0, 42],
                                "keyed": {"path": "<relative path>", "size": 123,
                                          "sha256": "...", "offsets": {"7": [0, 55], ...}},
                                "operator_state": [...]}]}},
     "hmac": "<optional HMAC-SHA256, see snapshot.integrity>",
     "checksum": "<sha256 of the document without this field>"}

State file paths are relative to the directory holding ``_metadata``, so a savepoint can be
moved or copied. A checkpoint is valid only once ``_metadata`` exists and verifies.

A ``_metadata`` file is untrusted input: :func:`load_snapshot` decodes it into the typed
handles of :mod:`.handles`, which refuse any path that could leave its directory,
and, with a secret configured, checks its HMAC (:mod:`.integrity`). A job signs every
``_metadata`` it writes (``$CKPT_SNAPSHOT_HMAC_KEY``, else its metadata DB's key) and checks
the signature before it restores (:mod:`..checkpoint.trust`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..errors import CheckpointStorageError, CorruptCheckpointError, RestoreError
from ..fs.storage import (
    METADATA_FILE,
    absolute_location,
    basename,
    filesystem_for,
    is_s3,
    join,
    parent,
    sha256,
    strip_scheme,
)
from . import integrity
from .handles import SnapshotMetadata, StateFileHandle

FORMAT = "airflow-checkpoint-provider/checkpoint"
VERSION = 1


def _canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _signed_part(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("checksum", integrity.FIELD)}


def encode_metadata(doc: dict, *, hmac_key: str | bytes | None = None) -> bytes:
    """The ``_metadata`` bytes of ``doc``: with an HMAC when a secret is configured
    (``hmac_key`` or ``$CKPT_SNAPSHOT_HMAC_KEY``), then the SHA-256 checksum."""
    body = _signed_part(doc)
    body["format"] = FORMAT
    body["version"] = VERSION
    key = integrity.configured_key(hmac_key)
    if key is not None:
        body[integrity.FIELD] = integrity.sign(_canonical(body), key)
    body["checksum"] = sha256(_canonical(body))
    return json.dumps(body, sort_keys=True, indent=1).encode("utf-8")


@dataclass
class LoadedSnapshot:
    """A verified ``_metadata`` and the directory its relative paths start from.

    ``metadata`` is what the engine reads (typed, every field validated); ``doc`` is the
    document as stored, kept for what must see it byte for byte: its signature
    (:func:`signature_status`) and the inspection tools that print it."""

    directory: str
    doc: dict
    metadata: SnapshotMetadata = field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.metadata is None:
            self.metadata = SnapshotMetadata.from_dict(self.doc, location=self.directory)

    @property
    def checkpoint_id(self) -> int:
        return self.metadata.checkpoint_id

    @property
    def operators(self) -> dict:
        """The stored document's operators (JSON); the typed ones: ``metadata.operators``."""
        return self.doc["operators"]

    def read_state_file(self, handle: dict) -> bytes:
        return read_state_file(self.directory, handle)


def read_state_file(directory: str, handle: dict | StateFileHandle) -> bytes:
    """Read a state file named by a handle and verify its size and SHA-256."""
    if not isinstance(handle, StateFileHandle):
        handle = StateFileHandle.from_dict(handle, location=directory)
    return read_verified(handle.location_in(directory), handle.size, handle.sha256)


def read_verified(path: str, size: int, digest: str) -> bytes:
    """Read the state file at ``path`` and check its size and SHA-256.

    A missing file is a :class:`CorruptCheckpointError` (the snapshot is incomplete and no
    retry brings it back); other read errors stay :class:`CheckpointStorageError`.
    """
    fs = filesystem_for(path)
    try:
        data = fs.read_bytes(path)
    except CheckpointStorageError as exc:
        if not fs.exists(path):
            raise CorruptCheckpointError(
                f"state file {path} listed in {METADATA_FILE} is missing: the snapshot is "
                "incomplete") from exc
        raise
    if len(data) != size or sha256(data) != digest:
        raise CorruptCheckpointError(
            f"state file {path} does not match its checksum in {METADATA_FILE} "
            f"(expected {size} bytes sha256 {digest[:12]}..., "
            f"found {len(data)} bytes sha256 {sha256(data)[:12]}...)"
        )
    return data


def signature_status(doc: dict, key: bytes) -> str:
    """``"valid"`` (``doc`` carries an HMAC under ``key``), ``"unsigned"`` or ``"invalid"``
    (signed with another key, or modified after it was signed)."""
    if integrity.FIELD not in doc:
        return "unsigned"
    ok = integrity.verify(_canonical(_signed_part(doc)), key, doc[integrity.FIELD])
    return "valid" if ok else "invalid"


def load_snapshot(path: str, *, hmac_key: str | bytes | None = None,
                  check_hmac: bool = True) -> LoadedSnapshot:
    """Load and verify ``_metadata`` from a checkpoint/savepoint directory or the file itself.

    Checks, in order: JSON, format and version, the SHA-256 checksum, the HMAC when a secret
    is configured (``hmac_key`` or ``$CKPT_SNAPSHOT_HMAC_KEY``) and ``check_hmac`` (a job's
    restore passes ``False`` and decides with :mod:`..checkpoint.trust`), then every field of
    the document (:class:`~..snapshot.handles.SnapshotMetadata`). Any failure is a
    :class:`CorruptCheckpointError` naming ``_metadata`` (and the field).
    """
    path = absolute_location(path) if is_s3(path) else strip_scheme(path)
    fs = filesystem_for(path)
    if basename(path) == METADATA_FILE:  # local path or s3:// URI
        meta_path, directory = path, parent(path)
    else:
        meta_path, directory = join(path, METADATA_FILE), path
    if not fs.exists(meta_path):
        if not fs.exists(directory):
            raise RestoreError(f"restore path {path} does not exist")
        raise RestoreError(
            f"restore path {path} is not a completed checkpoint or savepoint "
            f"(no {METADATA_FILE} file in it)"
        )
    raw = fs.read_bytes(meta_path)
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise CorruptCheckpointError(f"{meta_path} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CorruptCheckpointError(f"{meta_path} is not a checkpoint metadata file")
    if doc.get("version") != VERSION:
        raise CorruptCheckpointError(
            f"{meta_path} has format version {doc.get('version')}; this engine reads version {VERSION}"
        )
    expected = doc.get("checksum")
    body = {k: v for k, v in doc.items() if k != "checksum"}
    if expected != sha256(_canonical(body)):
        raise CorruptCheckpointError(f"{meta_path} fails its checksum: the file is corrupt")
    key = integrity.configured_key(hmac_key) if check_hmac else None
    if key is not None:
        if integrity.FIELD not in doc:
            raise CorruptCheckpointError(
                f"{meta_path} is not signed, but a snapshot HMAC key is configured "
                f"(${integrity.ENV_KEY}); refusing an unsigned snapshot")
        if not integrity.verify(_canonical(_signed_part(doc)), key, doc[integrity.FIELD]):
            raise CorruptCheckpointError(
                f"{meta_path} fails its HMAC: it was modified or signed with another key")
    return LoadedSnapshot(directory=directory, doc=doc,
                          metadata=SnapshotMetadata.from_dict(doc, location=meta_path))
