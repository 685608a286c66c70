"""Keyed integrity of ``_metadata``: an HMAC-SHA256 with a secret only the engine has.

The plain SHA-256 ``checksum`` of ``_metadata`` catches accidents (a flipped byte, a
truncated write) but not an edit: whoever edits the file recomputes it. So ``_metadata``
also carries ``"hmac"``: HMAC-SHA256 over its canonical content, which includes the size and
SHA-256 of every state file, so a state file cannot be swapped either.

Signed by default. A job signs every snapshot with ``$CKPT_SNAPSHOT_HMAC_KEY`` if it is set,
else with its metadata DB's own random key (table ``snapshot_keys``, created once per DB,
:meth:`~..catalog.MetadataStore.snapshot_key`); the key never sits beside the snapshots, so
a snapshot-store writer cannot sign. Before a job restores a snapshot,
:mod:`..checkpoint.trust` requires a valid ``hmac`` under the key in use, else
:class:`~..errors.UntrustedSnapshotError` -- unless the user passes the trust flag
(relocating a savepoint to another deployment) or the snapshot was recorded COMPLETED in
that DB before its key existed (the upgrade from unsigned snapshots).

This module only computes and checks signatures. :func:`configured_key` is the environment
key (or an explicit one): with it, :func:`..codec.load_snapshot` -- and so the read-only
tools (``ckpt inspect``, ``verify-restore``, ``ckpt state read``) -- refuses an unsigned or
mis-signed ``_metadata`` as :class:`CorruptCheckpointError`; without it they read any
snapshot. ``ckpt state write`` signs with the DB's key when given ``--db``. The README's
"Liveness, failures and runtime security" states what a snapshot-store writer can do.
"""

from __future__ import annotations

import hashlib
import hmac

from ..settings import SNAPSHOT_HMAC_KEY

ENV_KEY = SNAPSHOT_HMAC_KEY.name
FIELD = "hmac"


def configured_key(explicit: str | bytes | None = None) -> bytes | None:
    """The secret: ``explicit`` if given, else ``$CKPT_SNAPSHOT_HMAC_KEY``, else ``None``."""
    value = explicit if explicit is not None else SNAPSHOT_HMAC_KEY.get()
    if value is None:
        return None
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def sign(canonical_body: bytes, key: bytes) -> str:
    return hmac.new(key, canonical_body, hashlib.sha256).hexdigest()


def verify(canonical_body: bytes, key: bytes, signature: object) -> bool:
    return isinstance(signature, str) and hmac.compare_digest(sign(canonical_body, key), signature)
