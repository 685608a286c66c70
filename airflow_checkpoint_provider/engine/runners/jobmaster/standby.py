"""Standby start for savepoint and last-state upgrades (``restore="standby:JOB"``, issue 41).

A savepoint upgrade used to stop v1 and only then submit v2: the whole application start
(tens of seconds on a cluster) was output gap. With ``restore="standby:JOB"`` v2 is started
*before* v1 stops: its application comes up and acquires its executors (the Spark runner
checks the slots first), then the job master waits here, with no job row (v1 still owns the
name), until job ``JOB`` (an id, id prefix or name; a name means its live job at the time of
the call) has ended, and restores what it left:

* STOPPED: the savepoint of its stop-with-savepoint request (savepoint upgrade);
* CANCELED, FAILED, LOST or FINISHED: its latest completed checkpoint (last-state upgrade; a
  job that left no completed checkpoint makes the standby fail, ``RestoreError``).

The restore then goes through every check of an explicit path (trust, fencing, the sources'
and sinks' consent), and one more: the snapshot was found through job ``JOB``'s history, so
its signed ``_metadata`` must name that job (issue 50: another job's snapshot copied there
is refused with ``ForeignSnapshotError``; there is no older candidate to fall back to). The job the standby waits for must exist and not have ended yet when
the standby starts (``ConfigurationError``: nothing to wait for).

The standby says where it is in the catalog's ``standbys`` table (revision 0012,
:mod:`...catalog.standbys`), under the job id it will run as: ``READY`` when its application
is up and it only waits (the moment to stop the old job: Airflow's standby upgrade waits for
it), then ``TAKEN_OVER``, ``FAILED``, or ``CANCELED`` when a client withdrew it before the
hand-over (:meth:`~...catalog.MetadataStore.request_standby_cancel`: it ends with
:class:`StandbyCanceled`, without a job row).
"""

from __future__ import annotations

import logging
import time

from ...catalog import MetadataStore, StandbyCanceled, StandbyStatus
from ...errors import ConfigurationError, RestoreError
from ...plan.job import Restore, RestoreKind

log = logging.getLogger(__name__)

#: how often the standby reads the job's status
POLL_SECONDS = 0.1


def wait_for_handover(store: MetadataStore, restore: Restore, *, job_id: str | None = None,
                      job_name: str | None = None,
                      poll_seconds: float = POLL_SECONDS) -> tuple[str, str]:
    """Block until the job named by ``restore`` (a standby restore, ``standby:JOB``) ended;
    return the snapshot to restore and the id of that job, whose snapshot it must be (see
    the module docstring). With ``job_id`` (the id the standby will run under) the wait is
    recorded in ``standbys``: ``READY`` first, then how it ended; a cancellation requested
    there ends it with :class:`StandbyCanceled`."""
    if restore.kind is not RestoreKind.STANDBY or not restore.target:
        raise ConfigurationError(f"restore {restore.text!r} is not a standby restore "
                                 "(standby:JOB_ID or standby:JOB_NAME)")
    try:
        job = store.resolve_job(restore.target)
    except LookupError as exc:
        raise ConfigurationError(f"restore {restore.text!r}: {exc}") from exc
    if job.is_terminal:
        raise ConfigurationError(
            f"restore {restore.text!r}: job {job.job_name} ({job.job_id}) is already {job.status}; "
            "a standby waits for a running job. Restore its savepoint or checkpoint by path, "
            "or 'latest'")
    if job_id is not None:
        store.mark_standby_ready(job_id=job_id, job_name=job_name or job.job_name,
                                 waits_for_job_id=job.job_id)
    log.info("Standby: application ready; waiting for job %s (%s) to end", job.job_name,
             job.job_id)
    started = time.monotonic()
    try:
        location, status = _wait(store, job.job_id, job_id, poll_seconds)
    except StandbyCanceled as exc:
        log.info("Standby %s: %s", job_id, exc)
        _end(store, job_id, StandbyStatus.CANCELED, detail=str(exc))
        raise
    except BaseException as exc:
        _end(store, job_id, StandbyStatus.FAILED, detail=f"{type(exc).__name__}: {exc}")
        raise
    log.info("Standby: job %s (%s) ended %s after %.1f s of waiting; restoring %s",
             job.job_name, job.job_id, status, time.monotonic() - started, location)
    _end(store, job_id, StandbyStatus.TAKEN_OVER, restore_location=location)
    return location, job.job_id


def _end(store: MetadataStore, job_id: str | None, status: StandbyStatus, *,
         restore_location: str | None = None, detail: str | None = None) -> None:
    if job_id is None:
        return
    try:
        store.end_standby(job_id, status, restore_location=restore_location, detail=detail)
    except Exception as exc:  # noqa: BLE001 - the hand-over's own outcome matters more
        log.warning("Standby %s: could not record %s in the metadata DB: %s", job_id, status,
                    exc)


def _wait(store: MetadataStore, predecessor: str, job_id: str | None,
          poll_seconds: float) -> tuple[str, str]:
    """Poll until job ``predecessor`` ended (or the standby ``job_id`` was withdrawn);
    return the snapshot it left and how it ended."""
    while True:
        rec = store.get_job(predecessor)
        if rec is None or rec.is_terminal:
            break
        if job_id is not None:
            me = store.get_standby(job_id)
            if me is not None and me.cancel_requested_at is not None:
                raise StandbyCanceled(f"withdrawn while job {predecessor} still ran "
                                      f"({rec.status}): nothing restored")
        time.sleep(poll_seconds)
    status = rec.status if rec is not None else "gone"
    location = None
    if status == "STOPPED":
        for req in reversed(store.list_control_requests(predecessor)):
            if req.action == "STOP_WITH_SAVEPOINT" and req.status == "SUCCEEDED":
                location = (req.result or {}).get("location")
                break
    if location is None:
        latest = store.latest_completed_checkpoint(job_id=predecessor, kind=None)
        if latest is None:
            raise RestoreError(f"standby: job {predecessor} ended {status} "
                               "and left no completed checkpoint or savepoint to restore")
        location = latest.location
    return location, status
