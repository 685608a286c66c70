"""``ckpt`` verbs of what jobs left in their sinks: ``discard-output`` (a rollback removes
what the job it rolls back committed) and ``leftovers`` (prepared transactions of ended
jobs that nothing will commit)."""

from __future__ import annotations

import sys

import click

from ..catalog.models import TERMINAL_JOB_STATUSES
from ..connectors.capabilities import SupportsDiscardCommitted, SupportsFencing
from ..connectors.sink_names import parse_gid
from ..errors import EngineError
from .common import _echo_json, _store, db_option, json_option, load_pipeline, main

DONE = ("COMPLETED", "SUBSUMED")


def _sinks(pipeline_ref: str) -> list[tuple[str, object]]:
    graph = load_pipeline(pipeline_ref).execution_graph()
    return [(n.uid, n.payload) for v in graph.vertices for n in v.nodes
            if n.kind == "sink" and n.uid]


@main.command("discard-output")
@click.argument("pipeline")
@click.argument("job")
@db_option
@click.option("--dry-run", is_flag=True, help="Only say whether every sink can remove it.")
@json_option
def discard_output(pipeline: str, job: str, db: str | None, dry_run: bool,
                   as_json: bool) -> None:
    """Remove everything ended JOB committed to PIPELINE's sinks (and what it staged).

    Before a rollback restarts the previous version from the snapshot JOB restored: what JOB
    committed after it would otherwise be published twice. Refused (exit 1, nothing
    removed) when a sink cannot remove committed output (e.g. a PostgreSQL 2PC sink)."""
    store = _store(db)
    try:
        rec = store.resolve_job(job)
    except LookupError as exc:
        raise click.ClickException(str(exc)) from exc
    if rec.status not in TERMINAL_JOB_STATUSES:
        raise click.ClickException(f"job {rec.job_name} ({rec.job_id}) is {rec.status}: "
                                   "cancel it first (`ckpt cancel`)")
    sinks = _sinks(pipeline)
    unable = [f"{uid!r} ({sink.describe()})" for uid, sink in sinks  # type: ignore[attr-defined]
              if not sink.can_discard_committed()]  # type: ignore[attr-defined]
    report: dict = {"job_id": rec.job_id, "job_name": rec.job_name, "status": rec.status,
                    "refused": unable, "discarded": {}, "dry_run": dry_run}
    if not unable and not dry_run:
        for uid, sink in sinks:
            try:
                gone = (list(sink.discard_committed_after(uid, rec.job_id, -1) or [])
                        if isinstance(sink, SupportsDiscardCommitted) else [])
                if isinstance(sink, SupportsFencing):
                    gone += list(sink.discard_staged_of_job(uid, rec.job_id) or [])
            except EngineError as exc:
                raise click.ClickException(f"sink {uid!r}: {exc}") from exc
            report["discarded"][uid] = gone
    if as_json:
        _echo_json(report)
    elif unable:
        click.echo(f"REFUSED: sink(s) {', '.join(unable)} cannot remove what job "
                   f"{rec.job_name} ({rec.job_id}) committed", err=True)
    else:
        for uid, gone in report["discarded"].items():
            click.echo(f"sink {uid!r}: removed {len(gone)} item(s) of job {rec.job_id}")
    if unable:
        sys.exit(1)


def leftover_report(store, urls: list[str]) -> list[dict]:
    """Prepared transactions in the databases at ``urls`` whose job ended: ``abortable`` when
    their checkpoint never completed (nothing will commit them), else a restore of that
    checkpoint commits them."""
    from ..connectors.postgres.sink import prepared_transactions

    rows = []
    for url in urls:
        for gid, prepared_at in prepared_transactions(url):
            p = parse_gid(gid)
            job = store.get_job(p.job_id) if p is not None else None
            if p is None or (job is not None and job.status not in TERMINAL_JOB_STATUSES):
                continue  # a running job's own, or not ours
            done = [c.checkpoint_id for c in store.list_checkpoints(p.job_id)
                    if c.status in DONE] if job is not None else []
            newest = max(done, default=-1)
            rows.append({"url": url, "gid": gid, "prepared_at": prepared_at,
                         "job_id": p.job_id, "job_status": job.status if job else None,
                         "checkpoint_id": p.checkpoint_id,
                         "abortable": job is not None and (p.checkpoint_id or 0) > newest})
    return rows


@main.command()
@click.argument("pipeline", required=False)
@click.option("--postgres", "urls", multiple=True,
              help="A PostgreSQL database to check (repeatable; default: PIPELINE's sinks').")
@click.option("--abort", is_flag=True,
              help="Roll back the leftovers of checkpoints that never completed.")
@db_option
@json_option
def leftovers(pipeline: str | None, urls: tuple[str, ...], abort: bool, db: str | None,
              as_json: bool) -> None:
    """Prepared transactions that ended jobs left in PostgreSQL databases (a cancel or a crash
    before the job master rolled them back). Exit 1 when some of them can be rolled back
    (never completed) and --abort was not given."""
    from ..connectors.postgres.sink import PostgresSink, rollback_prepared

    targets = list(urls)
    if pipeline:
        targets += [s.url for _, s in _sinks(pipeline) if isinstance(s, PostgresSink)]
    if not targets:
        raise click.ClickException("no PostgreSQL database to check: give PIPELINE (with a "
                                   "PostgresSink) or --postgres URL")
    store = _store(db)
    rows = leftover_report(store, sorted(set(targets)))
    if abort:
        for url in sorted({r["url"] for r in rows}):
            rollback_prepared(url, [r["gid"] for r in rows if r["url"] == url and r["abortable"]])
        rows = [dict(r, aborted=r["abortable"]) for r in rows]
    if as_json:
        _echo_json(rows)
    else:
        for r in rows:
            what = ("rolled back" if r.get("aborted") else "never completed: `--abort` rolls "
                    "it back") if r["abortable"] else "of a completed checkpoint: a restore of " \
                "it commits it"
            click.echo(f"{r['gid']}  job {r['job_id']} ({r['job_status'] or 'unknown'}), "
                       f"checkpoint {r['checkpoint_id']}, prepared {r['prepared_at']}: {what}")
        if not rows:
            click.echo("no prepared transactions left by ended jobs")
    if any(not r.get("aborted") and r["abortable"] for r in rows):
        sys.exit(1)
