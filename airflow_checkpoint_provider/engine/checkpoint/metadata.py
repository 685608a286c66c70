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
     "checksum": "<sha256 of the document without this field>"}

State file paths are relative to the directory holding ``_metadata``, so a savepoint can be
moved or copied. A checkpoint is valid only once ``_metadata`` exists and verifies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import CorruptCheckpointError, RestoreError
from .storage import (
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

FORMAT = "airflow-checkpoint-provider/checkpoint"
VERSION = 1


def _canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encode_metadata(doc: dict) -> bytes:
    body = {k: v for k, v in doc.items() if k != "checksum"}
    body["format"] = FORMAT
    body["version"] = VERSION
    body["checksum"] = sha256(_canonical(body))
    return json.dumps(body, sort_keys=True, indent=1).encode("utf-8")


@dataclass
class LoadedSnapshot:
    """A verified ``_metadata`` and the directory its relative paths start from."""

    directory: str
    doc: dict

    @property
    def checkpoint_id(self) -> int:
        return int(self.doc["checkpoint_id"])

    @property
    def operators(self) -> dict:
        return self.doc["operators"]

    def read_state_file(self, handle: dict) -> bytes:
        return read_state_file(self.directory, handle)


def read_state_file(directory: str, handle: dict) -> bytes:
    """Read a state file named by a handle and verify its size and SHA-256."""
    path = join(directory, handle["path"])
    data = filesystem_for(path).read_bytes(path)
    if len(data) != handle["size"] or sha256(data) != handle["sha256"]:
        raise CorruptCheckpointError(
            f"state file {path} does not match its checksum in {METADATA_FILE} "
            f"(expected {handle['size']} bytes sha256 {handle['sha256'][:12]}..., "
            f"found {len(data)} bytes sha256 {sha256(data)[:12]}...)"
        )
    return data


def load_snapshot(path: str) -> LoadedSnapshot:
    """Load and verify ``_metadata`` from a checkpoint/savepoint directory or the file itself."""
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
    return LoadedSnapshot(directory=directory, doc=doc)
