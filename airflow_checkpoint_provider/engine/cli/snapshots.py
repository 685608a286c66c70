"""``ckpt`` verbs of checkpoints and savepoints: history (``checkpoints``, ``savepoints``,
``report``), what a snapshot holds (``inspect``, ``verify-restore``), retention and pins
(``savepoints --max-age/--max-count``, ``dispose``, ``pin``, ``unpin``)."""

from __future__ import annotations

import sys

import click

from ..errors import EngineError
from .common import _echo_json, _record, _store, db_option, echo, load_pipeline, main


@main.command()
@click.argument("job")
@db_option
@click.option("--json", "as_json", is_flag=True)
@click.option("--tasks", is_flag=True,
              help="Also one line per task: sync/async/alignment time, state size, whether "
                   "it was unaligned and the in-flight bytes it persisted.")
def checkpoints(job: str, db: str | None, as_json: bool, tasks: bool) -> None:
    """Checkpoint history of JOB (job id, id prefix or job name: its newest job)."""
    from ..lifecycle.report import format_bytes, format_ms
    from ..lifecycle.stats import in_flight_bytes, is_unaligned, max_task_metric

    store = _store(db)
    try:
        rec = store.resolve_job(job)
    except LookupError as exc:
        raise click.ClickException(str(exc)) from exc
    rows = store.list_checkpoints(rec.job_id)
    if as_json:
        _echo_json([_record(r) for r in rows])
        return
    echo(f"job {rec.job_name} ({rec.job_id}) {rec.status}")
    for r in rows:
        align = max_task_metric(r, "alignment_ms")
        extra = f"align {format_ms(align)}" if align is not None else ""
        if is_unaligned(r):
            extra += f", unaligned, {format_bytes(in_flight_bytes(r))} in flight"
        echo(f"  {r.kind:<10} {r.checkpoint_id:>5} {r.status:<10} "
                   f"{(r.duration_ms or 0):>6} ms {(r.state_size or 0):>10} B  "
                   f"{extra + '  ' if extra else ''}{r.failure_reason or r.location}")
        if not tasks:
            continue
        for t in sorted(r.task_stats or (), key=lambda t: (t.get("vertex"), t.get("subtask"))):
            echo(f"      task {t.get('vertex')}.{t.get('subtask')}: "
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
@click.option("--key-type", "key_types", multiple=True, metavar="UID=TYPE",
              help="The key type the job gives operator UID (int, str, bool, float, bytes, "
                   "...): a restore that would change it is reported. Repeatable.")
@click.option("--fence-sinks", is_flag=True,
              help="Also check that every sink can run fenced (a blue-green validation run).")
@click.option("--probe-records", type=int, default=200, show_default=True, metavar="N",
              help="Input records read from the restored positions to check the keys the "
                   "job gives its restored keyed operators (0: none).")
@click.option("--trust-snapshot", is_flag=True,
              help="With --db: accept a snapshot not signed with the DB's key, as "
                   "'ckpt run --trust-snapshot' would.")
@db_option
@click.option("--json", "as_json", is_flag=True)
def verify_restore_cmd(pipeline: str, snapshot: str, parallelism: int | None,
                       allow_non_restored_state: bool, sample_key_groups: int,
                       key_types: tuple[str, ...], fence_sinks: bool, probe_records: int,
                       trust_snapshot: bool, db: str | None, as_json: bool) -> None:
    """Check, without starting it, that PIPELINE (module:function) restores SNAPSHOT (a
    checkpoint or savepoint directory); exits 1 naming each incompatibility (operator uid,
    state, reason). With --db, the snapshot must also be signed with that metadata DB's key
    (or $CKPT_SNAPSHOT_HMAC_KEY), as the restore requires."""
    from ..lifecycle.verify import verify_restore

    declared = {}
    for item in key_types:
        uid, sep, kind = item.partition("=")
        if not sep or not uid or not kind:
            raise click.BadParameter(f"{item!r} is not UID=TYPE", param_hint="--key-type")
        declared[uid] = kind
    loaded = load_pipeline(pipeline)
    report = verify_restore(loaded, snapshot, parallelism=parallelism,
                            allow_non_restored_state=allow_non_restored_state,
                            sample_key_groups=sample_key_groups, key_types=declared or None,
                            probe_records=probe_records, metadata_url=db,
                            trust_snapshot=trust_snapshot)
    if fence_sinks:  # refused here, not after a job start (a Spark app: ~70 s)
        from ..errors import EngineError
        from ..lifecycle.verify import RestoreProblem
        from ..runners.jobmaster.fencing import check_fencing

        graph = loaded.execution_graph()
        try:
            check_fencing(graph, loaded.name)
        except EngineError as exc:
            refused = [n.uid for v in graph.vertices for n in v.nodes
                       if n.kind == "sink" and not n.payload.can_hold_commits()]
            report.problems.insert(0, RestoreProblem.of(exc, refused[0] if refused else None))
    if as_json:
        _echo_json(report.to_dict())
    else:
        echo(("OK: " if report.ok else "CANNOT RESTORE: ") + report.describe())
    if not report.ok:
        sys.exit(1)


@main.command()
@click.argument("path")
@click.option("--json", "as_json", is_flag=True)
@click.option("--verify", is_flag=True,
              help="Also read every state file and check its size and checksum; exits 1 "
                   "naming the first missing or corrupt file.")
@db_option
def inspect(path: str, as_json: bool, verify: bool, db: str | None) -> None:
    """What a checkpoint or savepoint at PATH holds (verifies the _metadata checksum; with
    --verify every state file too), and whether it is signed with the key a job would
    check ($CKPT_SNAPSHOT_HMAC_KEY, else the --db metadata DB's key): yes, no or unknown."""
    from ..snapshot.codec import load_snapshot
    from ..snapshot.verify import verify_snapshot

    try:
        snap = load_snapshot(path)
        verified = verify_snapshot(snap) if verify else None
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    doc = snap.doc
    summary = {"path": snap.directory, "job_id": doc["job_id"], "job_name": doc["job_name"],
               "checkpoint_id": doc["checkpoint_id"], "kind": doc["kind"],
               "timestamp_ms": doc["timestamp_ms"],
               "signed_by_this_db": _signed_by(doc, db), "operators": []}
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
    echo(f"{summary['kind'].lower()} {summary['checkpoint_id']} of job {summary['job_name']} "
               f"({summary['job_id']}) at {snap.directory}")
    if verified is not None:
        echo(f"  verified {verified} state files: sizes and checksums match")
    echo(f"  signed with this deployment's key: {summary['signed_by_this_db']}")
    for op in summary["operators"]:
        size = sum(s["state_bytes"] for s in op["subtasks"])
        states = ", ".join(f"{n} ({m['kind']})" for n, m in sorted(op["states"].items())) or "-"
        echo(f"  {op['uid']:<20} {op['kind']:<8} parallelism {op['parallelism']}/"
                   f"{op['max_parallelism']}  {size} B  states: {states}")
        for s in op["subtasks"]:
            kg = s["key_group_range"]
            echo(f"    subtask {s['index']}: key groups {kg[0]}-{kg[1]}, {s['state_bytes']} B"
                       if kg else f"    subtask {s['index']}: {s['operator_state_entries']} "
                                  "operator state entries")


def _signed_by(doc: dict, db: str | None) -> str:
    """``yes``/``no``: does ``doc`` carry a valid HMAC under $CKPT_SNAPSHOT_HMAC_KEY, else
    the DB's key (never created here); ``unknown`` without either."""
    from ..snapshot import integrity
    from ..snapshot.codec import signature_status

    key = integrity.configured_key()
    if key is None and db:
        from ..catalog import MetadataStore

        try:
            with MetadataStore(db, migrate=False) as store:
                found = store.snapshot_key(create=False)
        except Exception:  # noqa: BLE001 - a read-only report: the DB may be unreachable
            return "unknown"
        if found is None:
            return "no"
        key = found.key
    if key is None:
        return "unknown"
    return "yes" if signature_status(doc, key) == "valid" else "no"


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
    from ..extras import require

    require("report")
    from ..lifecycle.report import render_report
    from ..lifecycle.stats import checkpoint_statistics

    store = _store(db)
    try:
        if as_json:
            _echo_json(checkpoint_statistics(store, job))
            return
        fmt = "png" if as_png else "html"
        path = render_report(store, job, out_path or f"report.{fmt}", fmt=fmt)
    except LookupError as exc:
        raise click.ClickException(str(exc)) from exc
    echo(f"wrote {path}")


@main.command()
@click.argument("path")
@db_option
def dispose(path: str, db: str | None) -> None:
    """Delete the savepoint at PATH (refuses checkpoints and savepoints a running job uses)."""
    from ..lifecycle.savepoints import dispose_savepoint

    try:
        dispose_savepoint(path, _store(db))
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    echo(f"disposed savepoint {path}")


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
    from ..lifecycle.savepoints import apply_savepoint_retention, list_savepoints

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
        echo(line)
    for r in rows:
        echo(f"  savepoint {r.checkpoint_id:>5} of {r.job_id[:8]} {r.complete_time:%Y-%m-%d %H:%M:%S} "
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
    from ..lifecycle.savepoints import pin_savepoint

    try:
        rec = pin_savepoint(_store(db), path, holder=holder, ttl_seconds=ttl, reason=reason)
    except (EngineError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    until = f"until {rec.expires_at:%Y-%m-%d %H:%M:%S} UTC" if rec.expires_at else "until unpinned"
    echo(f"pinned {rec.location} for {rec.holder} {until}")


@main.command()
@click.argument("path", required=False)
@db_option
@click.option("--holder", required=True, help="Whose pins to release.")
def unpin(path: str | None, db: str | None, holder: str) -> None:
    """Release HOLDER's pin on the savepoint at PATH (without PATH: all of HOLDER's pins)."""
    from ..lifecycle.savepoints import unpin_savepoint

    removed = unpin_savepoint(_store(db), holder=holder, path=path)
    echo(f"released {removed} pin(s) of {holder}")
