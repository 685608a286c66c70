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
from .catalog.models import ControlRequestStatus, JobStatus
from .checkpoint.storage import absolute_location
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
    from .catalog import MetadataStore

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


def apply_overrides(pipeline: Pipeline, *, checkpoint_dir: str | None = None,
                    metadata_url: str | None = None, interval_ms: int | None = None,
                    restart: str | None = None, job_name: str | None = None,
                    savepoint_dir: str | None = None) -> Pipeline:
    """Options given on the command line (or by Airflow) win over the pipeline's own."""
    from .config import RestartStrategy

    changes = {}
    if checkpoint_dir:
        changes["directory"] = checkpoint_dir
    if interval_ms is not None:
        changes["interval_ms"] = interval_ms if interval_ms > 0 else None
    if savepoint_dir:
        changes["savepoint_directory"] = savepoint_dir
    if changes:
        pipeline.checkpoint = dataclasses.replace(pipeline.checkpoint, **changes)
    if metadata_url:
        pipeline.metadata_url = metadata_url
    if restart:
        pipeline.restart_strategy = RestartStrategy.parse(restart)
    if job_name:
        pipeline.name = job_name
        pipeline._graph.name = job_name
    return pipeline


def run_options(fn):
    options = [
        click.argument("pipeline_ref", metavar="PIPELINE"),
        click.option("--restore", default=None, help="'latest' or a checkpoint/savepoint path."),
        click.option("--allow-non-restored-state", is_flag=True),
        click.option("--job-id", default=None, help="Job id to use (default: a new uuid)."),
        click.option("--job-name", default=None, help="Override the pipeline's name."),
        click.option("--runner", type=click.Choice(["local", "spark"]), default="local"),
        click.option("--master", default=None, help="Spark master URL (runner spark)."),
        click.option("--coordinator-port", type=int, default=0,
                     help="TCP port of the checkpoint coordinator (0 = any free port)."),
        click.option("--checkpoint-dir", default=None, help="Override the checkpoint directory."),
        click.option("--savepoint-dir", default=None, help="Default savepoint directory."),
        click.option("--interval-ms", type=int, default=None,
                     help="Override the checkpoint interval (0 = no periodic checkpoints)."),
        click.option("--restart", default=None,
                     help="Restart strategy: none | fixed:ATTEMPTS:DELAY_MS | "
                          "exponential:ATTEMPTS:INITIAL_MS:MAX_MS."),
        click.option("--db", "metadata_url", default=None, envvar=DEFAULT_METADATA_ENV,
                     help="Metadata DB URL (default: the pipeline's)."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
        click.option("--metrics-port", type=int, default=None, envvar="CKPT_METRICS_PORT",
                     help="Serve Prometheus metrics on this port (off by default; 0 = any)."),
        click.option("--progress/--no-progress", default=None,
                     help="Live progress line (default: on a terminal, unless --json)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@main.command()
@run_options
@click.option("--detach", is_flag=True,
              help="Start the job in the background; return once it is RUNNING.")
@click.option("--log-file", default=None, help="Log file of a detached job.")
@click.option("--wait-timeout", type=float, default=300.0, show_default=True,
              help="Seconds --detach waits for the job to be RUNNING.")
def run(pipeline_ref: str, restore: str | None, allow_non_restored_state: bool,
        job_id: str | None, job_name: str | None, runner: str, master: str | None,
        coordinator_port: int, checkpoint_dir: str | None, savepoint_dir: str | None,
        interval_ms: int | None, restart: str | None, metadata_url: str | None, as_json: bool,
        metrics_port: int | None, progress: bool | None, detach: bool, log_file: str | None,
        wait_timeout: float) -> None:
    """Run PIPELINE (module:function returning a Pipeline) until it ends."""
    logging.getLogger("airflow_checkpoint_provider").setLevel(logging.INFO)
    from .names import validate_job_id, validate_job_name

    try:  # names become paths: refuse bad ones before anything is loaded or written
        if job_name is not None:
            validate_job_name(job_name, "--job-name")
        if job_id is not None:
            validate_job_id(job_id, "--job-id")
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    pipeline = apply_overrides(load_pipeline(pipeline_ref), checkpoint_dir=checkpoint_dir,
                               metadata_url=metadata_url, interval_ms=interval_ms,
                               restart=restart, job_name=job_name, savepoint_dir=savepoint_dir)
    if detach:
        from .detach import start_detached

        given = {"--restore": restore, "--job-name": job_name, "--runner": runner,
                 "--master": master, "--coordinator-port": coordinator_port or None,
                 "--checkpoint-dir": checkpoint_dir, "--savepoint-dir": savepoint_dir,
                 "--interval-ms": interval_ms, "--restart": restart, "--db": metadata_url,
                 "--metrics-port": metrics_port}
        argv = ["run", pipeline_ref]
        for flag, value in given.items():
            if value is not None:
                argv += [flag, str(value)]
        if allow_non_restored_state:
            argv.append("--allow-non-restored-state")
        info = start_detached(pipeline, argv, job_id=job_id, log_file=log_file,
                              timeout=wait_timeout)
        if as_json:
            _echo_json(info)
        else:
            click.echo(f"job {info['job_name']} ({info['job_id']}) {info['status']}; "
                       f"logs: {info['log_file']}")
        return
    options: dict = {"coordinator_port": coordinator_port, "metrics_port": metrics_port,
                     "show_progress": (not as_json) if progress is None else progress}
    if runner == "spark":
        options["master"] = master
    try:
        result = pipeline.run(runner, restore=restore,
                              allow_non_restored_state=allow_non_restored_state, job_id=job_id,
                              **options)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        _echo_json(dataclasses.asdict(result))
    else:
        click.echo(f"job {result.job_name} ({result.job_id}) {result.status}: "
                   f"{result.checkpoints_completed} checkpoints, {result.restarts} restarts; "
                   f"latest checkpoint {result.latest_checkpoint}")
    if result.status not in (JobStatus.FINISHED, JobStatus.STOPPED, JobStatus.CANCELED):
        sys.exit(1)


def _request(db: str | None, job: str, action: str, params: dict, timeout: float,
             as_json: bool) -> None:
    """Insert a control request for JOB and wait until the job answered it."""
    import time

    store = _store(db)
    try:
        rec = store.resolve_job(job)
        request_id = store.submit_control_request(rec.job_id, action, params)
    except (LookupError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    deadline = time.monotonic() + timeout
    req = store.get_control_request(request_id)
    while req.status not in (ControlRequestStatus.SUCCEEDED, ControlRequestStatus.FAILED):
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"{action} request {request_id} for job {rec.job_id} not answered within "
                f"{timeout:.0f} s (status {req.status}); is the job running?")
        time.sleep(0.2)
        req = store.get_control_request(request_id)
    if as_json:
        _echo_json(_record(req))
    elif req.status == ControlRequestStatus.SUCCEEDED:
        result = req.result or {}
        where = f" at {result['location']}" if result.get("location") else ""
        click.echo(f"{action.lower()} of job {rec.job_name} ({rec.job_id}) succeeded"
                   + (f": checkpoint {result['checkpoint_id']}" if "checkpoint_id" in result else "")
                   + where)
    if req.status == ControlRequestStatus.FAILED:
        if as_json:
            sys.exit(1)
        raise click.ClickException(f"{action} request for job {rec.job_id} failed: {req.error}")


timeout_option = click.option("--timeout", type=float, default=120.0, show_default=True,
                              help="Seconds to wait for the job's answer.")
json_option = click.option("--json", "as_json", is_flag=True)


@main.command()
@click.argument("job")
@db_option
@timeout_option
@json_option
def checkpoint(job: str, db: str | None, timeout: float, as_json: bool) -> None:
    """Trigger a checkpoint of running JOB now and wait for it."""
    _request(db, job, "CHECKPOINT", {}, timeout, as_json)


@main.command()
@click.argument("job")
@click.option("--dir", "directory", default=None, help="Savepoint directory.")
@db_option
@timeout_option
@json_option
def savepoint(job: str, directory: str | None, db: str | None, timeout: float, as_json: bool) -> None:
    """Trigger a savepoint of running JOB and wait for it."""
    params = {"directory": absolute_location(directory)} if directory else {}
    _request(db, job, "SAVEPOINT", params, timeout, as_json)


@main.command()
@click.argument("job")
@click.option("--savepoint-dir", default=None, help="Savepoint directory.")
@click.option("--drain", is_flag=True, help="End the input first (flush bounded/timer work).")
@db_option
@timeout_option
@json_option
def stop(job: str, savepoint_dir: str | None, drain: bool, db: str | None, timeout: float,
         as_json: bool) -> None:
    """Stop JOB with a savepoint: sources stop, sinks commit, the job ends STOPPED."""
    params = {"drain": drain}
    if savepoint_dir:
        params["directory"] = absolute_location(savepoint_dir)
    _request(db, job, "STOP_WITH_SAVEPOINT", params, timeout, as_json)


@main.command()
@click.argument("job")
@db_option
@timeout_option
@json_option
def cancel(job: str, db: str | None, timeout: float, as_json: bool) -> None:
    """Cancel running JOB (no savepoint); it ends CANCELED."""
    _request(db, job, "CANCEL", {}, timeout, as_json)


@main.command()
@db_option
@click.option("--name", default=None, help="Only jobs with this name.")
@click.option("--json", "as_json", is_flag=True)
def jobs(db: str | None, name: str | None, as_json: bool) -> None:
    """List jobs, newest first (active jobs without a recent heartbeat are shown LOST)."""
    store = _store(db)
    store.mark_lost_jobs(name)
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
@click.option("--tasks", is_flag=True,
              help="Also one line per task: sync/async/alignment time, state size, whether "
                   "it was unaligned and the in-flight bytes it persisted.")
def checkpoints(job: str, db: str | None, as_json: bool, tasks: bool) -> None:
    """Checkpoint history of JOB (job id, id prefix or job name: its newest job)."""
    from .report import format_bytes, format_ms
    from .stats import in_flight_bytes, is_unaligned, max_task_metric

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
        align = max_task_metric(r, "alignment_ms")
        extra = f"align {format_ms(align)}" if align is not None else ""
        if is_unaligned(r):
            extra += f", unaligned, {format_bytes(in_flight_bytes(r))} in flight"
        click.echo(f"  {r.kind:<10} {r.checkpoint_id:>5} {r.status:<10} "
                   f"{(r.duration_ms or 0):>6} ms {(r.state_size or 0):>10} B  "
                   f"{extra + '  ' if extra else ''}{r.failure_reason or r.location}")
        if not tasks:
            continue
        for t in sorted(r.task_stats or (), key=lambda t: (t.get("vertex"), t.get("subtask"))):
            click.echo(f"      task {t.get('vertex')}.{t.get('subtask')}: "
                       f"sync {format_ms(t.get('sync_ms'))}, async {format_ms(t.get('async_ms'))}, "
                       f"alignment {format_ms(t.get('alignment_ms'))}, "
                       f"state {format_bytes(t.get('state_size'))}"
                       + (f", unaligned, {format_bytes(t.get('inflight_bytes'))} in flight "
                          f"({t.get('inflight_records', 0)} records)"
                          if t.get("unaligned") else ""))


@main.command("verify-restore")
@click.argument("pipeline")
@click.argument("snapshot")
@click.option("--parallelism", type=int, default=None,
              help="Check a restore with every operator at this parallelism.")
@click.option("--allow-non-restored-state", is_flag=True,
              help="State of snapshot operators the pipeline no longer has may be dropped.")
@click.option("--sample-key-groups", type=int, default=1, show_default=True,
              help="Key groups per subtask whose state is restored and opened.")
@click.option("--json", "as_json", is_flag=True)
def verify_restore_cmd(pipeline: str, snapshot: str, parallelism: int | None,
                       allow_non_restored_state: bool, sample_key_groups: int,
                       as_json: bool) -> None:
    """Check, without starting it, that PIPELINE (module:function) restores SNAPSHOT (a
    checkpoint or savepoint directory); exits 1 naming each incompatibility (operator uid,
    state, reason)."""
    from .verify import verify_restore

    report = verify_restore(load_pipeline(pipeline), snapshot, parallelism=parallelism,
                            allow_non_restored_state=allow_non_restored_state,
                            sample_key_groups=sample_key_groups)
    if as_json:
        _echo_json(report.to_dict())
    else:
        click.echo(("OK: " if report.ok else "CANNOT RESTORE: ") + report.describe())
    if not report.ok:
        sys.exit(1)


@main.command()
@click.argument("path")
@click.option("--json", "as_json", is_flag=True)
@click.option("--verify", is_flag=True,
              help="Also read every state file and check its size and checksum; exits 1 "
                   "naming the first missing or corrupt file.")
def inspect(path: str, as_json: bool, verify: bool) -> None:
    """What a checkpoint or savepoint at PATH holds (verifies the _metadata checksum; with
    --verify every state file too)."""
    from .snapshot.codec import load_snapshot
    from .snapshot.verify import verify_snapshot

    try:
        snap = load_snapshot(path)
        verified = verify_snapshot(snap) if verify else None
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    doc = snap.doc
    summary = {"path": snap.directory, "job_id": doc["job_id"], "job_name": doc["job_name"],
               "checkpoint_id": doc["checkpoint_id"], "kind": doc["kind"],
               "timestamp_ms": doc["timestamp_ms"], "operators": []}
    if verified is not None:
        summary["verified_files"] = verified
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
    if verified is not None:
        click.echo(f"  verified {verified} state files: sizes and checksums match")
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


@main.command()
@click.argument("job")
@db_option
@click.option("--out", "out_path", default=None,
              help="File to write (default: report.html, or report.png with --png).")
@click.option("--png", "as_png", is_flag=True,
              help="Write one PNG image with the charts instead of the HTML page.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the checkpoint statistics as JSON instead of writing a report.")
def report(job: str, db: str | None, out_path: str | None, as_png: bool, as_json: bool) -> None:
    """Checkpoint report of JOB: a self-contained HTML page (or PNG) with charts of
    durations, sizes and alignment, savepoints and restarts marked, and the slowest task."""
    from .extras import require

    require("report")
    from .report import render_report
    from .stats import checkpoint_statistics

    store = _store(db)
    try:
        if as_json:
            _echo_json(checkpoint_statistics(store, job))
            return
        fmt = "png" if as_png else "html"
        path = render_report(store, job, out_path or f"report.{fmt}", fmt=fmt)
    except LookupError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"wrote {path}")


@main.command()
@click.argument("path")
@db_option
def dispose(path: str, db: str | None) -> None:
    """Delete the savepoint at PATH (refuses checkpoints and savepoints a running job uses)."""
    from .savepoints import dispose_savepoint

    try:
        dispose_savepoint(path, _store(db))
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"disposed savepoint {path}")


@main.command()
@click.argument("job")
@db_option
@click.option("--all-jobs", is_flag=True, help="Savepoints of every job with JOB's name.")
@click.option("--max-age", "max_age", type=float, default=None,
              help="Dispose savepoints older than this many seconds (newest always kept).")
@click.option("--max-count", type=int, default=None,
              help="Keep at most this many savepoints (newest always kept).")
@click.option("--json", "as_json", is_flag=True)
def savepoints(job: str, db: str | None, all_jobs: bool, max_age: float | None,
               max_count: int | None, as_json: bool) -> None:
    """Savepoint history of JOB; with --max-age/--max-count, apply retention first.

    Retention never disposes the newest savepoint, one a job that is not terminal was
    restored from, or a pinned one (`ckpt pin`); it prints, per savepoint, what it did and
    why (with --json: {"retention": {...}, "savepoints": [...]})."""
    from .savepoints import apply_savepoint_retention, list_savepoints

    store = _store(db)
    try:
        rec = store.resolve_job(job)
    except LookupError as exc:
        raise click.ClickException(str(exc)) from exc
    report = None
    if max_age is not None or max_count is not None:
        report = apply_savepoint_retention(store, job_name=rec.job_name,
                                           max_age_seconds=max_age, max_count=max_count)
    rows = (list_savepoints(store, job_name=rec.job_name) if all_jobs or report
            else list_savepoints(store, job_id=rec.job_id))
    if as_json:
        saved = [_record(r) for r in rows]
        _echo_json({"retention": report.to_dict(), "savepoints": saved} if report else saved)
        return
    for line in report.lines() if report else []:
        click.echo(line)
    for r in rows:
        click.echo(f"  savepoint {r.checkpoint_id:>5} of {r.job_id[:8]} {r.complete_time:%Y-%m-%d %H:%M:%S} "
                   f"{(r.state_size or 0):>10} B  {r.location}")


@main.command()
@click.argument("path")
@db_option
@click.option("--holder", required=True,
              help="Who needs the savepoint (e.g. upgrade-orders, a user name).")
@click.option("--ttl", type=float, default=None,
              help="Seconds until the pin expires (default: until `ckpt unpin`).")
@click.option("--reason", default=None, help="Why, shown by retention.")
def pin(path: str, db: str | None, holder: str, ttl: float | None, reason: str | None) -> None:
    """Pin the savepoint at PATH: retention and dispose keep it while the pin lasts."""
    from .savepoints import pin_savepoint

    try:
        rec = pin_savepoint(_store(db), path, holder=holder, ttl_seconds=ttl, reason=reason)
    except (EngineError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    until = f"until {rec.expires_at:%Y-%m-%d %H:%M:%S} UTC" if rec.expires_at else "until unpinned"
    click.echo(f"pinned {rec.location} for {rec.holder} {until}")


@main.command()
@click.argument("path", required=False)
@db_option
@click.option("--holder", required=True, help="Whose pins to release.")
def unpin(path: str | None, db: str | None, holder: str) -> None:
    """Release HOLDER's pin on the savepoint at PATH (without PATH: all of HOLDER's pins)."""
    from .savepoints import unpin_savepoint

    removed = unpin_savepoint(_store(db), holder=holder, path=path)
    click.echo(f"released {removed} pin(s) of {holder}")


@main.group()
def state() -> None:
    """Read and write the keyed state of checkpoints and savepoints as tables."""


@state.command("read")
@click.argument("snapshot")
@click.option("--uid", required=True, help="Operator uid whose keyed state to read.")
@click.option("--state", "state_name", default=None, help="Only this state.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "parquet"]),
              default="table", show_default=True)
@click.option("--output", default=None, help="File to write (required for parquet).")
def state_read(snapshot: str, uid: str, state_name: str | None, fmt: str,
               output: str | None) -> None:
    """The keyed state of operator UID in SNAPSHOT (a checkpoint or savepoint directory):
    key, key_group, state, then value or the aggregate's accumulator columns."""
    from .state_io import read_state_table

    try:
        table = read_state_table(snapshot, uid, state_name)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    if fmt == "parquet":
        import pyarrow.parquet as pq

        if output is None:
            raise click.UsageError("--format parquet needs --output PATH")
        pq.write_table(table, output)
        click.echo(f"wrote {table.num_rows} rows to {output}")
        return
    text = (json.dumps(table.to_pylist(), default=repr, indent=1) if fmt == "json"
            else table.to_pandas().to_string(index=False))
    if output is None:
        click.echo(text)
    else:
        with open(output, "w") as f:
            f.write(text + "\n")
        click.echo(f"wrote {table.num_rows} rows to {output}")


@state.command("write")
@click.option("--from", "source", default=None,
              help="Snapshot to copy with UID's keys rewritten or dropped.")
@click.option("--pipeline", "pipeline_ref", default=None,
              help="module:function of a new job to bootstrap state for (instead of --from).")
@click.option("--uid", required=True, help="Operator uid whose keyed state to write.")
@click.option("--state", "state_name", default=None,
              help="State the table's rows belong to (else the table's 'state' column).")
@click.option("--kind", type=click.Choice(["value", "list", "map", "reducing"]),
              default="value", show_default=True, help="State kind (with --pipeline).")
@click.option("--table", "table_path", default=None,
              help="Parquet or Arrow IPC file: key and value (or accumulator) columns.")
@click.option("--drop-key", "drop_keys", multiple=True, help="Key to drop (repeatable).")
@click.option("--int-keys", is_flag=True, help="--drop-key values are integers.")
@click.option("--output", required=True, help="Directory of the new savepoint.")
def state_write(source: str | None, pipeline_ref: str | None, uid: str,
                state_name: str | None, kind: str, table_path: str | None,
                drop_keys: tuple[str, ...], int_keys: bool, output: str) -> None:
    """Write a savepoint at OUTPUT: a fixed copy of --from, or bootstrap state for
    --pipeline from --table. Restore it by path at any parallelism."""
    from .state_io import bootstrap_savepoint, rewrite_savepoint

    if (source is None) == (pipeline_ref is None):
        raise click.UsageError("give exactly one of --from SNAPSHOT and --pipeline REF")
    table = _read_table_file(table_path) if table_path else None
    try:
        if source is not None:
            path = rewrite_savepoint(source, output, uid=uid, table=table, state=state_name,
                                     drop_keys=[int(k) for k in drop_keys] if int_keys
                                     else drop_keys)
        else:
            if table is None:
                raise click.UsageError("--pipeline needs --table")
            path = bootstrap_savepoint(output, table, pipeline=load_pipeline(pipeline_ref or ""),
                                       uid=uid, state=state_name, kind=kind)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"wrote savepoint {path}")


def _read_table_file(path: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except (pa.ArrowInvalid, OSError):
        try:
            with pa.memory_map(path) as source:
                return pa.ipc.open_file(source).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise click.BadParameter(f"{path} is neither a Parquet nor an Arrow IPC file "
                                     f"({exc})", param_hint="--table") from exc


@main.group()
def db() -> None:
    """Metadata DB administration."""


@db.command("upgrade")
@db_option
def db_upgrade(db: str | None) -> None:
    """Create or migrate the metadata DB schema to the newest revision."""
    from .catalog import to_sqlalchemy_url, upgrade_database

    upgrade_database(_db_url(db))
    from .catalog import redacted_url

    click.echo(f"metadata DB at {redacted_url(to_sqlalchemy_url(_db_url(db)))} is up to date")


if __name__ == "__main__":
    main()
