"""Which snapshots a job may restore, and the key its own snapshots are signed with.

Every ``_metadata`` a job writes carries an HMAC-SHA256 (:mod:`..snapshot.integrity`) under
the *key in use*: ``$CKPT_SNAPSHOT_HMAC_KEY`` if set, else the metadata DB's own random key
(:meth:`~..catalog.MetadataStore.snapshot_key`, created once per DB). Before a job restores a
snapshot -- by path, ``latest``, fallback or failover -- the snapshot must carry a valid
HMAC under that key, else :class:`~..errors.UntrustedSnapshotError`. Two exceptions:

* the explicit trust flag (``trust_snapshot=True``, ``ckpt run --trust-snapshot``): the
  user vouches for the snapshot (a savepoint from another deployment, or one written by
  ``ckpt state write`` without a key); the job's own checkpoints are signed as usual;
* the upgrade transition, with the DB key only: a snapshot recorded in this DB's
  ``checkpoints`` table as COMPLETED at its location before the key was created (written
  unsigned by an engine that did not sign yet) is accepted, with a WARNING.

A snapshot accepted once stays accepted for the job (CLAIM mode may fail over to it).

**Whose snapshot it is** (security issue 50). A valid signature says that *a* job of this
deployment wrote the snapshot, not which: another job's checkpoint copied over this job's
latest one is validly signed. A snapshot found through a job's history -- a ``checkpoints``
row (``restore="latest"``, including the newest job of the name and the fallback to older
checkpoints), a failover candidate, the snapshot a standby takes over -- must name that
row's job in its ``_metadata`` (``owner``, or ``record.job_id``), else
:class:`~.ownership.ForeignSnapshotError`. The check follows the signature check, so the
job id it compares is a signed one (or one the trust flag or the transition vouches for).
Another job's snapshot is restored only by its explicit path (``restore=PATH``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from ..catalog import CheckpointRecord, MetadataStore
from ..catalog.models import CheckpointStatus
from ..errors import UntrustedSnapshotError
from ..fs.storage import canonical_location
from ..snapshot import integrity
from ..snapshot.codec import LoadedSnapshot, load_snapshot, signature_status
from .ownership import check_owner

log = logging.getLogger(__name__)

#: locations a WARNING was logged for (once per process)
_warned: set[str] = set()


def _warn_once(location: str, message: str, *args: object) -> None:
    if location not in _warned:
        _warned.add(location)
        log.warning(message, *args)


class SnapshotTrust:
    """The key a job signs with and the rule deciding which snapshots it restores.

    :param store: the job's metadata DB (its key is created here if it has none yet, unless
        ``$CKPT_SNAPSHOT_HMAC_KEY`` is set: that key then takes precedence).
    :param trust_snapshot: accept snapshots not signed with the key in use (the user vouches
        for them).
    """

    def __init__(self, store: MetadataStore, *, trust_snapshot: bool = False) -> None:
        self.store = store
        self.trust_snapshot = trust_snapshot
        env_key = integrity.configured_key()
        self.key_created_at: datetime | None
        if env_key is not None:
            self.key, self.key_created_at = env_key, None
            self.key_source = f"${integrity.ENV_KEY}"
        else:
            db_key = store.snapshot_key()
            assert db_key is not None  # created if absent
            self.key, self.key_created_at = db_key.key, db_key.created_at
            self.key_source = "this metadata DB's snapshot key"
        #: snapshot directories accepted without a valid HMAC (trust flag, transition)
        self.accepted: set[str] = set()

    def load(self, location: str, *, record: CheckpointRecord | None = None,
             owner: str | None = None) -> LoadedSnapshot:
        """Load ``location`` (checksums and fields verified) and :meth:`check` it.

        :param record: the ``checkpoints`` row it was found through: the snapshot must be
            that row's job's.
        :param owner: the job it must be (a failover or standby candidate); ``None`` with no
            ``record``: an explicit path, any job's.

        Raises :class:`~.ownership.ForeignSnapshotError` (an ``UntrustedSnapshotError``)
        when its signed ``_metadata`` names another job."""
        snapshot = load_snapshot(location, check_hmac=False)
        self.check(snapshot, record=record, given=location)
        expected = owner if owner is not None else (record.job_id if record is not None
                                                    else None)
        check_owner(snapshot.directory, snapshot.metadata.job_id, expected)
        return snapshot

    def check(self, snapshot: LoadedSnapshot, *, record: CheckpointRecord | None = None,
              given: str | None = None) -> None:
        """Raise :class:`UntrustedSnapshotError` unless ``snapshot`` may be restored.

        :param record: the ``checkpoints`` row it was found through (``latest``), if any.
        """
        # over the document as stored (its HMAC covers the raw JSON, not the typed view)
        status = signature_status(snapshot.doc, self.key)
        where = snapshot.directory
        if status == "valid" or where in self.accepted:
            return
        what = "not signed" if status == "unsigned" else (
            "signed with another key (or modified after it was signed)")
        if self.trust_snapshot:
            self.accepted.add(where)
            _warn_once(where, "Restoring snapshot %s, which is %s, because the trust flag was "
                       "given (trust_snapshot / --trust-snapshot); this job's own snapshots "
                       "are signed with %s", where, what, self.key_source)
            return
        if self._recorded_before_key(snapshot, record, given):
            self.accepted.add(where)
            _warn_once(where, "Restoring snapshot %s, which is not signed: it was recorded "
                       "COMPLETED in this metadata DB before its snapshot key was created "
                       "(written before snapshots were signed); this job's own snapshots "
                       "are signed", where)
            return
        raise UntrustedSnapshotError(
            f"snapshot {where} is untrusted: it has no valid signature by {self.key_source} "
            f"({what}), so it was not written by a job of this metadata DB "
            f"({self.store.safe_url}), or it was modified since. If you "
            "trust its content (a savepoint from another deployment, or one written by "
            "'ckpt state write' without --db), restore it with the trust flag: "
            "Pipeline.run(..., trust_snapshot=True), 'ckpt run --trust-snapshot', or the "
            "submit operator's trust_snapshot=True; the job's own checkpoints are then "
            "signed with this DB's key")

    def _recorded_before_key(self, snapshot: LoadedSnapshot, record: CheckpointRecord | None,
                             given: str | None) -> bool:
        """The transition rule: this DB recorded ``snapshot`` COMPLETED, at this location,
        before its snapshot key existed (only with the DB key, not ``$CKPT_...``)."""
        if self.key_created_at is None:
            return False
        here = canonical_location(snapshot.directory)
        candidates = [record] if record is not None else [
            self.store.checkpoint_at(loc)
            for loc in dict.fromkeys(x for x in (given, snapshot.directory, here) if x)]
        for rec in candidates:
            if (rec is not None and rec.status == CheckpointStatus.COMPLETED
                    and rec.complete_time is not None
                    and rec.complete_time < self.key_created_at
                    and canonical_location(rec.location) == here):
                return True
        return False


__all__ = ["SnapshotTrust"]
