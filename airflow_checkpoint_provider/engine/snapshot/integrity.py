"""Optional keyed integrity of ``_metadata``: an HMAC-SHA256 with a secret only the engine has.

The plain SHA-256 ``checksum`` of ``_metadata`` catches accidents (a flipped byte, a
truncated write) but not an edit: whoever edits the file recomputes it. With a secret
configured (``$CKPT_SNAPSHOT_HMAC_KEY``, or ``hmac_key=`` passed to the codec), ``_metadata``
also carries ``"hmac"``: HMAC-SHA256 over its canonical content, which includes the size and
SHA-256 of every state file, so a state file cannot be swapped either. On restore, with the
secret configured, a missing or wrong ``hmac`` is a :class:`CorruptCheckpointError`; without
it the field is ignored (the snapshot is then only as trusted as its storage).

Not signed by default, on purpose: savepoints must restore in another deployment (another
metadata DB), a key stored beside the snapshots would be readable by the writer it guards
against, and every reader and writer of snapshots (``ckpt inspect``, ``verify-restore``,
``ckpt state``) would need a per-DB key. Without a key, restored sink transactions are still
bound to their sink and job (:mod:`..sink_names`); the README's "Liveness, failures and
runtime security" states what a snapshot-store writer can do with and without a key.
"""

from __future__ import annotations

import hashlib
import hmac
import os

ENV_KEY = "CKPT_SNAPSHOT_HMAC_KEY"
FIELD = "hmac"


def configured_key(explicit: str | bytes | None = None) -> bytes | None:
    """The secret: ``explicit`` if given, else ``$CKPT_SNAPSHOT_HMAC_KEY``, else ``None``."""
    value = explicit if explicit is not None else os.environ.get(ENV_KEY) or None
    if value is None:
        return None
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def sign(canonical_body: bytes, key: bytes) -> str:
    return hmac.new(key, canonical_body, hashlib.sha256).hexdigest()


def verify(canonical_body: bytes, key: bytes, signature: object) -> bool:
    return isinstance(signature, str) and hmac.compare_digest(sign(canonical_body, key), signature)
