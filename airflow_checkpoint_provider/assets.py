"""Airflow assets for savepoints and checkpoints: schedule a DAG on "a new savepoint of job X".

URI scheme (stable; one asset per job name and snapshot kind)::

    checkpoint://<job_name>/savepoints     a savepoint of a job named <job_name> completed
    checkpoint://<job_name>/checkpoints    a (periodic) checkpoint of it completed

``<job_name>`` follows the engine's name rule (:mod:`airflow_checkpoint_provider.engine.names`:
letters, digits, ``.``, ``_``, ``-``), so the URI needs no quoting; the provider registers
:func:`sanitize_uri` for the ``checkpoint`` scheme, so a DAG declaring a malformed
``Asset("checkpoint://...")`` fails at parse time instead of never being scheduled.

Job names are usually templated (``"{{ params.job_name }}"``), so the emitting tasks
declare an :class:`~airflow.sdk.AssetAlias` (:data:`SAVEPOINTS_ALIAS`,
:data:`CHECKPOINTS_ALIAS`) as outlet and attach the concrete asset at run time; Airflow
creates the asset on its first event. Every event carries the extras of
:func:`snapshot_extra`: ``job_id``, ``job_name``, ``checkpoint_id``, ``location``, ``kind``
(``SAVEPOINT`` / ``CHECKPOINT``) and, when known, ``complete_time`` and ``state_size``.

A downstream DAG::

    from airflow.sdk import DAG, Asset

    with DAG("verify_savepoints", schedule=savepoint_asset("orders")):
        ...  # context["triggering_asset_events"] holds the events and their extras
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult

from airflow.sdk import Asset, AssetAlias

from airflow_checkpoint_provider.engine.client import validate_job_name

if TYPE_CHECKING:
    from airflow.sdk import Context

SCHEME = "checkpoint"
SAVEPOINTS_ALIAS = "checkpoint-savepoints"
CHECKPOINTS_ALIAS = "checkpoint-checkpoints"
_KINDS = {"SAVEPOINT": "savepoints", "CHECKPOINT": "checkpoints"}


def asset_uri(job_name: str, kind: str = "SAVEPOINT") -> str:
    """``checkpoint://<job_name>/savepoints`` (or ``/checkpoints``); the name is validated."""
    try:
        segment = _KINDS[kind.upper()]
    except KeyError:
        raise ValueError(f"snapshot kind {kind!r} is unknown; use SAVEPOINT or CHECKPOINT") from None
    return f"{SCHEME}://{validate_job_name(job_name)}/{segment}"


def savepoint_asset(job_name: str) -> Asset:
    """The asset updated by every completed savepoint of jobs named ``job_name``."""
    return Asset(uri=asset_uri(job_name, "SAVEPOINT"))


def checkpoint_asset(job_name: str) -> Asset:
    """The asset updated when a checkpoint of jobs named ``job_name`` is seen completed."""
    return Asset(uri=asset_uri(job_name, "CHECKPOINT"))


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's URI handler for the ``checkpoint`` scheme (``asset-uris`` in the provider
    info): the host must be a valid job name and the path ``/savepoints`` or ``/checkpoints``."""
    validate_job_name(uri.netloc, "job name in a checkpoint:// asset URI")
    if uri.path not in ("/savepoints", "/checkpoints"):
        raise ValueError(f"checkpoint:// asset URI path must be /savepoints or /checkpoints, "
                         f"not {uri.path!r}")
    return uri


def snapshot_extra(*, job_id: str, job_name: str, checkpoint_id: int | None, location: str,
                   kind: str, record: Any = None) -> dict[str, Any]:
    """The extras of an asset event for one snapshot (``record``: its CheckpointRecord)."""
    extra: dict[str, Any] = {"job_id": job_id, "job_name": job_name,
                             "checkpoint_id": None if checkpoint_id is None else int(checkpoint_id),
                             "location": location, "kind": kind.upper()}
    if record is not None:
        if getattr(record, "complete_time", None) is not None:
            extra["complete_time"] = record.complete_time.isoformat()
        if getattr(record, "state_size", None) is not None:
            extra["state_size"] = int(record.state_size)
    return extra


def with_alias_outlet(kwargs: dict[str, Any], alias: str, emit: bool) -> dict[str, Any]:
    """``kwargs`` of an operator with ``AssetAlias(alias)`` added to its ``outlets``."""
    if emit:
        outlets = kwargs.get("outlets") or []
        outlets = list(outlets) if isinstance(outlets, list | tuple) else [outlets]
        kwargs["outlets"] = [*outlets, AssetAlias(alias)]
    return kwargs


def emit_snapshot_event(context: Context, alias: str, extra: dict[str, Any]) -> Asset | None:
    """Attach an event of ``extra["job_name"]``'s asset to the task's ``alias`` outlet.
    Returns the asset, or ``None`` when the context has no ``outlet_events`` (an operator
    executed outside a task run, e.g. called directly in a test)."""
    outlet_events = context.get("outlet_events")
    if outlet_events is None:
        return None
    asset = Asset(uri=asset_uri(extra["job_name"], extra["kind"]))
    outlet_events[AssetAlias(alias)].add(asset, extra=extra)
    return asset
