"""Snapshots as untrusted input: typed, validated state handles and keyed integrity.

* :mod:`.paths` -- checks for every path a snapshot names (bare names, no traversal);
* :mod:`.handles` -- frozen dataclasses of state handles, ``_metadata`` content and sink
  transactions, each with a validating ``from_dict``;
* :mod:`.integrity` -- the HMAC of ``_metadata`` (the metadata DB's key or ``$CKPT_SNAPSHOT_HMAC_KEY``);
* :mod:`.verify` -- read every state file of a snapshot and check its size and checksum
  (``ckpt inspect --verify``, restore fallback);
* :mod:`.codec` -- the ``_metadata`` file itself: encode, load and verify a snapshot.

Not to be confused with the *catalog* (:mod:`..catalog`, the metadata DB of jobs and
checkpoints) or the Airflow *metadata hook* that reads that DB.
"""

from __future__ import annotations

from .handles import (
    HeapChangelogFile,
    HeapChangelogHandle,
    KeyedStateHandle,
    OperatorState,
    RocksDBFile,
    RocksDBHandle,
    SinkTransaction,
    SnapshotMetadata,
    StateFileHandle,
    SubtaskState,
    keyed_handle_from_dict,
)
from .paths import safe_name, safe_relative_path

__all__ = [
    "HeapChangelogFile", "HeapChangelogHandle", "KeyedStateHandle", "OperatorState", "RocksDBFile", "RocksDBHandle", "SinkTransaction",
    "SnapshotMetadata", "StateFileHandle", "SubtaskState", "keyed_handle_from_dict",
    "safe_name", "safe_relative_path",
]
