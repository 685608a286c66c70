"""``ckpt`` verbs of jobs: run one (``run``), list them (``jobs``), and control a running
one through the metadata DB (``checkpoint``, ``savepoint``, ``stop``, ``cancel``)."""

from __future__ import annotations

import dataclasses
import logging
import sys
from datetime import UTC, datetime
from typing import Any

import click

from ..catalog.models import ControlRequestStatus, JobStatus
from ..connectors.kafka.lag import ConsumerLag, checkpoint_consumer_lag
from ..datastream.api import DEFAULT_METADATA_ENV, Pipeline
from ..datastream.run_request import CheckpointOverrides, Restore, RunRequest
from ..errors import EngineError
from ..fs.storage import absolute_location
from ..settings import CLIENT_POLL_SECONDS, METRICS_PORT
from .common import (
    _echo_json,
    _record,
    _store,
    db_option,
    echo,
    json_option,
    load_pipeline,
    main,
    timeout_option,
)


def apply_overrides(pipeline: Pipeline, *, checkpoint_dir: str | None = None,
                    metadata_url: str | None = None, interval_ms: int | None = None,
                    restart: str | None = None, job_name: str | None = None,
                    savepoint_dir: str | None = None) -> Pipeline:
    """Options given on the command line (or by Airflow) win over the pipeline's own (the
    overrides of a :class:`~..datastream.run_request.RunRequest`)."""
    request = RunRequest(pipeline="", job_name=job_name, restart=restart,
                         checkpoint=CheckpointOverrides(interval_ms=interval_ms,
                                                        directory=checkpoint_dir,
                                                        savepoint_directory=savepoint_dir))
    return request.apply(pipeline, metadata_url=metadata_url)


def run_request_from_options(*, pipeline_ref: str, restore: str | None = None,
                             allow_non_restored_state: bool = False,
                             trust_snapshot: bool = False, fence_sinks: bool = False,
                             job_id: str | None = None, job_name: str | None = None,
                             runner: str = "local", master: str | None = None,
                             coordinator_port: int = 0, checkpoint_dir: str | None = None,
                             savepoint_dir: str | None = None, interval_ms: int | None = None,
                             restart: str | None = None, metrics_port: int | None = None,
                             **_command_options: Any) -> RunRequest:
    """The :class:`RunRequest` the options of ``ckpt run`` describe (the command's own
    options, such as ``--json`` or ``--detach``, are not part of it)."""
    return RunRequest(
        pipeline=pipeline_ref, job_name=job_name, job_id=job_id, restore=Restore.parse(restore),
        allow_non_restored_state=allow_non_restored_state, trust_snapshot=trust_snapshot,
        fence_sinks=fence_sinks,
        checkpoint=CheckpointOverrides(interval_ms=interval_ms, directory=checkpoint_dir,
                                       savepoint_directory=savepoint_dir),
        restart=restart, runner=runner, master=master, coordinator_port=coordinator_port or 0,
        metrics_port=metrics_port)


def parse_run_argv(argv: list[str]) -> RunRequest:
    """The request ``ckpt run ARGV`` makes: :meth:`RunRequest.to_argv` read back."""
    ctx = run.make_context("run", list(argv))
    return run_request_from_options(**ctx.params)


def run_options(fn):
    options = [
        click.argument("pipeline_ref", metavar="PIPELINE"),
        click.option("--restore", default=None,
                     help="'latest', a checkpoint/savepoint path, or 'standby:JOB' (start now, "
                          "wait until JOB ended, restore what it left: its stop savepoint, "
                          "else its latest checkpoint)."),
        click.option("--allow-non-restored-state", is_flag=True),
        click.option("--trust-snapshot", is_flag=True,
                     help="Restore a snapshot not signed with this metadata DB's key (a "
                          "savepoint of another deployment, or written by 'ckpt state "
                          "write' without --db); the job's own checkpoints are signed."),
        click.option("--job-id", default=None, help="Job id to use (default: a new uuid)."),
        click.option("--fence-sinks", is_flag=True,
                     help="Hold every sink's commits (a blue-green validation run): nothing "
                          "is published; refused if a sink cannot hold its commits."),
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
                          "exponential:ATTEMPTS:INITIAL_MS:MAX_MS, optionally ending in "
                          ":identical=N (fail at once after N identical failures right after "
                          "restores; default 2, 0: never)."),
        click.option("--db", "metadata_url", default=None, envvar=DEFAULT_METADATA_ENV,
                     help="Metadata DB URL (default: the pipeline's)."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
        click.option("--metrics-port", type=int, default=None, envvar=METRICS_PORT.name,
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
        trust_snapshot: bool, fence_sinks: bool, job_id: str | None, job_name: str | None, runner: str, master: str | None,
        coordinator_port: int, checkpoint_dir: str | None, savepoint_dir: str | None,
        interval_ms: int | None, restart: str | None, metadata_url: str | None, as_json: bool,
        metrics_port: int | None, progress: bool | None, detach: bool, log_file: str | None,
        wait_timeout: float) -> None:
    """Run PIPELINE (module:function returning a Pipeline) until it ends."""
    logging.getLogger("airflow_checkpoint_provider").setLevel(logging.INFO)
    from ..names import validate_job_id, validate_job_name

    try:  # names become paths: refuse bad ones before anything is loaded or written
        if job_name is not None:
            validate_job_name(job_name, "--job-name")
        if job_id is not None:
            validate_job_id(job_id, "--job-id")
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        request = run_request_from_options(
            pipeline_ref=pipeline_ref, restore=restore,
            allow_non_restored_state=allow_non_restored_state, trust_snapshot=trust_snapshot,
            fence_sinks=fence_sinks, job_id=job_id, job_name=job_name, runner=runner,
            master=master, coordinator_port=coordinator_port, checkpoint_dir=checkpoint_dir,
            savepoint_dir=savepoint_dir, interval_ms=interval_ms, restart=restart,
            metrics_port=metrics_port)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    pipeline = request.apply(load_pipeline(pipeline_ref), metadata_url=metadata_url)
    if detach:
        from ..lifecycle.detach import start_detached

        # the request's one serialized form; the DB URL (a password): environment only
        info = start_detached(pipeline, ["run", *request.to_argv()], job_id=job_id,
                              log_file=log_file, timeout=wait_timeout,
                              metadata_url=metadata_url,
                              # on stderr: --json output stays clean
                              progress=lambda line: click.echo(line, err=True))
        if as_json:
            _echo_json(info)
        else:
            echo(f"job {info['job_name']} ({info['job_id']}) {info['status']}; "
                       f"logs: {info['log_file']}")
        return
    try:
        result = pipeline.run(request.runner, **request.run_options(),
                              show_progress=(not as_json) if progress is None else progress)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        _echo_json(dataclasses.asdict(result))
    else:
        echo(f"job {result.job_name} ({result.job_id}) {result.status}: "
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
        time.sleep(CLIENT_POLL_SECONDS)
        req = store.get_control_request(request_id)
    if as_json:
        _echo_json(_record(req))
    elif req.status == ControlRequestStatus.SUCCEEDED:
        result = req.result or {}
        where = f" at {result['location']}" if result.get("location") else ""
        echo(f"{action.lower()} of job {rec.job_name} ({rec.job_id}) succeeded"
                   + (f": checkpoint {result['checkpoint_id']}" if "checkpoint_id" in result else "")
                   + where)
    if req.status == ControlRequestStatus.FAILED:
        if as_json:
            sys.exit(1)
        raise click.ClickException(f"{action} request for job {rec.job_id} failed: {req.error}")


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
    """List jobs, newest first (active jobs without a recent heartbeat are shown LOST), with
    the Airflow DAG that owns each (``owner DAG/RUN``; none for a job started outside
    Airflow): a DAG's tasks act only on its own jobs, the CLI on every job. A running job
    the progress watchdog found stalled says where (``STALLED ... at operator``; in --json
    ``progress_stall`` with ``stalled_seconds``). An active job reading Kafka shows its
    consumer lag at its newest completed checkpoint, in total and per topic-partition
    (``kafka lag ...``; in --json ``kafka_consumer_lag``)."""
    store = _store(db)
    store.mark_lost_jobs(name)
    rows = store.list_jobs(job_name=name)
    if as_json:
        out = []
        for r in rows:
            doc = _record(r)
            if doc.get("progress_stall"):
                doc["progress_stall"] = {**doc["progress_stall"],
                                         "stalled_seconds": stalled_seconds(r.progress_stall)}
            lag = _kafka_lag(store, r)
            if lag is not None:
                doc["kafka_consumer_lag"] = lag.to_dict()
            out.append(doc)
        _echo_json(out)
        return
    for r in rows:
        owner = f"  owner {r.dag_id}/{r.dag_run_id or '-'}" if r.dag_id else ""
        echo(f"{r.job_id}  {r.job_name:<24} {r.status:<10} attempt {r.attempt}  "
             f"created {r.created_at:%Y-%m-%d %H:%M:%S}{owner}")
        if r.failure_reason and r.status in ("FAILED", "RESTARTING", "LOST"):
            # the failure's first line (where: operator, uid, subtask, phase); --json and
            # `ckpt report` hold the remote traceback too
            click.echo(f"    {r.failure_reason.splitlines()[0]}")
        if r.progress_stall and r.status in ("RUNNING", "RESTARTING"):
            stall = r.progress_stall
            click.echo(f"    STALLED for {stalled_seconds(stall) or 0:.0f} s at operator "
                       f"{stall.get('operator')!r} ({stall.get('kind')}): {stall.get('detail')}")
        lag = _kafka_lag(store, r)
        if lag is not None:
            click.echo(f"    kafka lag {lag.describe()} at checkpoint {lag.checkpoint_id}")


def _kafka_lag(store, job) -> ConsumerLag | None:
    """The Kafka consumer lag of an active job at its newest completed checkpoint (one
    indexed query per active job; none for ended jobs)."""
    if job.status not in (JobStatus.RUNNING, JobStatus.RESTARTING):
        return None
    return checkpoint_consumer_lag(
        store.latest_completed_checkpoint(job_id=job.job_id, kind=None))


def stalled_seconds(stall: dict) -> float | None:
    """Seconds since the stall of a ``jobs.progress_stall`` document began (now - since)."""
    try:
        since = datetime.fromisoformat(str(stall["since"]))
    except (KeyError, ValueError):
        return None
    return round(max(0.0, (datetime.now(UTC) - since).total_seconds()), 1)
