"""The ``ckpt`` command.

``--json`` output is stable: documented in README.md ("CLI"), keys are only ever added.
The metadata DB comes from ``--db`` or ``$CKPT_METADATA_URL``, else
``./checkpoints/metadata.db`` (the default of a Pipeline whose checkpoint directory is
``checkpoints``).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import sys
from datetime import datetime

import click

from .api import DEFAULT_METADATA_ENV, Pipeline, default_metadata_url
from .errors import EngineError


def _db_url(db: str | None) -> str:
    return db or default_metadata_url("checkpoints")


def _json_default(value):
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(type(value).__name__)


def _echo_json(obj) -> None:
    click.echo(json.dumps(obj, default=_json_default, indent=2, sort_keys=True))


def _record(rec) -> dict:
    return dataclasses.asdict(rec)


def _store(db: str | None):
    from .checkpoint.store import MetadataStore

    return MetadataStore(_db_url(db))


def load_pipeline(reference: str) -> Pipeline:
    """Import ``module:function`` and call it; it must return a Pipeline."""
    module_name, _, attr = reference.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"{reference!r} is not of the form module:function",
                                 param_hint="PIPELINE")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import module {module_name!r}: {exc}",
                                 param_hint="PIPELINE") from exc
    fn = getattr(module, attr, None)
    if fn is None:
        raise click.BadParameter(f"module {module_name!r} has no {attr!r}", param_hint="PIPELINE")
    pipeline = fn() if callable(fn) else fn
    if not isinstance(pipeline, Pipeline):
        raise click.BadParameter(f"{reference} returned {type(pipeline).__name__}, not a Pipeline",
                                 param_hint="PIPELINE")
    return pipeline


db_option = click.option("--db", envvar=DEFAULT_METADATA_ENV,
                         help="Metadata DB (SQLAlchemy URL or SQLite path).")


@click.group()
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Run and inspect checkpointed pipelines."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.command()
@click.argument("pipeline_ref", metavar="PIPELINE")
@click.option("--restore", default=None, help="'latest' or a checkpoint/savepoint path.")
@click.option("--allow-non-restored-state", is_flag=True)
@click.option("--job-id", default=None)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def run(pipeline_ref: str, restore: str | None, allow_non_restored_state: bool,
        job_id: str | None, as_json: bool) -> None:
    """Run PIPELINE (module:function returning a Pipeline) until it ends."""
    logging.getLogger("airflow_checkpoint_provider").setLevel(logging.INFO)
    pipeline = load_pipeline(pipeline_ref)
    try:
        result = pipeline.run(restore=restore, allow_non_restored_state=allow_non_restored_state,
                              job_id=job_id)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        _echo_json(dataclasses.asdict(result))
    else:
        click.echo(f"job {result.job_name} ({result.job_id}) {result.status}: "
                   f"{result.checkpoints_completed} checkpoints, {result.restarts} restarts; "
                   f"latest checkpoint {result.latest_checkpoint}")
    if result.status != "FINISHED":
        sys.exit(1)


@main.command()
@db_option
@click.option("--name", default=None, help="Only jobs with this name.")
@click.option("--json", "as_json", is_flag=True)
def jobs(db: str | None, name: str | None, as_json: bool) -> None:
    """List jobs, newest first."""
    store = _store(db)
    rows = store.list_jobs(job_name=name)
    if as_json:
        _echo_json([_record(r) for r in rows])
        return
    for r in rows:
        click.echo(f"{r.job_id}  {r.job_name:<24} {r.status:<10} attempt {r.attempt}  "
                   f"created {r.created_at:%Y-%m-%d %H:%M:%S}")


@main.command()
@click.argument("job")
@db_option
@click.option("--json", "as_json", is_flag=True)
def checkpoints(job: str, db: str | None, as_json: bool) -> None:
    """Checkpoint history of JOB (job id, id prefix or job name: its newest job)."""
    store = _store(db)
    try:
        rec = store.resolve_job(job)
    except LookupError as exc:
        raise click.ClickException(str(exc)) from exc
    rows = store.list_checkpoints(rec.job_id)
    if as_json:
        _echo_json([_record(r) for r in rows])
        return
    click.echo(f"job {rec.job_name} ({rec.job_id}) {rec.status}")
    for r in rows:
        click.echo(f"  {r.kind:<10} {r.checkpoint_id:>5} {r.status:<10} "
                   f"{(r.duration_ms or 0):>6} ms {(r.state_size or 0):>10} B  "
                   f"{r.failure_reason or r.location}")


@main.command()
@click.argument("path")
@click.option("--json", "as_json", is_flag=True)
def inspect(path: str, as_json: bool) -> None:
    """What a checkpoint or savepoint at PATH holds (verifies its checksum)."""
    from .checkpoint.metadata import load_snapshot

    try:
        snap = load_snapshot(path)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    doc = snap.doc
    summary = {"path": snap.directory, "job_id": doc["job_id"], "job_name": doc["job_name"],
               "checkpoint_id": doc["checkpoint_id"], "kind": doc["kind"],
               "timestamp_ms": doc["timestamp_ms"], "operators": []}
    for uid, op in sorted(doc["operators"].items()):
        summary["operators"].append({
            "uid": uid, "kind": op["kind"], "parallelism": op["parallelism"],
            "max_parallelism": op["max_parallelism"], "states": op["states"],
            "subtasks": [{"index": s["index"], "key_group_range": s.get("key_group_range"),
                          "state_bytes": (s["keyed"] or {}).get("size", 0),
                          "operator_state_entries": len(s.get("operator_state") or [])}
                         for s in op["subtasks"]]})
    if as_json:
        _echo_json(summary)
        return
    click.echo(f"{summary['kind'].lower()} {summary['checkpoint_id']} of job {summary['job_name']} "
               f"({summary['job_id']}) at {snap.directory}")
    for op in summary["operators"]:
        size = sum(s["state_bytes"] for s in op["subtasks"])
        states = ", ".join(f"{n} ({m['kind']})" for n, m in sorted(op["states"].items())) or "-"
        click.echo(f"  {op['uid']:<20} {op['kind']:<8} parallelism {op['parallelism']}/"
                   f"{op['max_parallelism']}  {size} B  states: {states}")
        for s in op["subtasks"]:
            kg = s["key_group_range"]
            click.echo(f"    subtask {s['index']}: key groups {kg[0]}-{kg[1]}, {s['state_bytes']} B"
                       if kg else f"    subtask {s['index']}: {s['operator_state_entries']} "
                                  "operator state entries")


@main.group()
def db() -> None:
    """Metadata DB administration."""


@db.command("upgrade")
@db_option
def db_upgrade(db: str | None) -> None:
    """Create or migrate the metadata DB schema to the newest revision."""
    from .checkpoint.store import upgrade_database

    upgrade_database(_db_url(db))
    click.echo(f"metadata DB at {_db_url(db)} is up to date")


if __name__ == "__main__":
    main()
