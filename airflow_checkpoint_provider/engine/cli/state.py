"""``ckpt state``: read and write the keyed state of checkpoints and savepoints as
tables."""

from __future__ import annotations

import json

import click

from ..errors import EngineError
from .common import db_option, echo, load_pipeline, main


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
@db_option
def state_read(snapshot: str, uid: str, state_name: str | None, fmt: str,
               output: str | None, db: str | None) -> None:
    """The keyed state of operator UID in SNAPSHOT (a checkpoint or savepoint directory):
    key, key_group, state, then value or the aggregate's accumulator columns. With --db,
    SNAPSHOT must be signed with that metadata DB's key (or $CKPT_SNAPSHOT_HMAC_KEY), as a
    job of it would require before restoring it."""
    from ..state_io import read_state_table

    try:
        if db:
            from ..catalog import MetadataStore
            from ..checkpoint.trust import SnapshotTrust

            with MetadataStore(db, migrate=False) as store:
                SnapshotTrust(store).load(snapshot)
        table = read_state_table(snapshot, uid, state_name)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    if fmt == "parquet":
        import pyarrow.parquet as pq

        if output is None:
            raise click.UsageError("--format parquet needs --output PATH")
        pq.write_table(table, output)
        echo(f"wrote {table.num_rows} rows to {output}")
        return
    text = (json.dumps(table.to_pylist(), default=repr, indent=1) if fmt == "json"
            else table.to_pandas().to_string(index=False))
    if output is None:
        echo(text)
    else:
        with open(output, "w") as f:
            f.write(text + "\n")
        echo(f"wrote {table.num_rows} rows to {output}")


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
@db_option
@click.option("--trust-snapshot", is_flag=True,
              help="With --db: copy a --from snapshot that is not signed with the DB's key.")
def state_write(source: str | None, pipeline_ref: str | None, uid: str,
                state_name: str | None, kind: str, table_path: str | None,
                drop_keys: tuple[str, ...], int_keys: bool, output: str, db: str | None,
                trust_snapshot: bool) -> None:
    """Write a savepoint at OUTPUT: a fixed copy of --from, or bootstrap state for
    --pipeline from --table. Restore it by path at any parallelism. With --db (or
    $CKPT_METADATA_URL) it is signed with that metadata DB's snapshot key (a --from snapshot
    must then be signed with it too, or --trust-snapshot); without it, and without
    $CKPT_SNAPSHOT_HMAC_KEY, it is unsigned and restoring it needs --trust-snapshot."""
    from ..snapshot import integrity
    from ..state_io import bootstrap_savepoint, rewrite_savepoint

    if (source is None) == (pipeline_ref is None):
        raise click.UsageError("give exactly one of --from SNAPSHOT and --pipeline REF")
    table = _read_table_file(table_path) if table_path else None
    try:
        key = _signing_key(db, source, trust_snapshot)
        if source is not None:
            path = rewrite_savepoint(source, output, uid=uid, table=table, state=state_name,
                                     drop_keys=[int(k) for k in drop_keys] if int_keys
                                     else drop_keys, hmac_key=key)
        else:
            if table is None:
                raise click.UsageError("--pipeline needs --table")
            path = bootstrap_savepoint(output, table, pipeline=load_pipeline(pipeline_ref or ""),
                                       uid=uid, state=state_name, kind=kind, hmac_key=key)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    if key is not None:
        signer = (f"${integrity.ENV_KEY}" if integrity.configured_key() is not None
                  else "the metadata DB's snapshot key")
        echo(f"wrote savepoint {path} (signed with {signer})")
    else:
        echo(f"wrote savepoint {path} (unsigned: no --db and no ${integrity.ENV_KEY}; "
                   "a job restores it only with --trust-snapshot / trust_snapshot=True)")


def _signing_key(db: str | None, source: str | None, trust_snapshot: bool) -> bytes | None:
    """The key the new savepoint is signed with: ``$CKPT_SNAPSHOT_HMAC_KEY``, else the DB's
    (``--db``), else none. With a DB, a ``--from`` snapshot must be one a job of that DB
    would restore (signed, or recorded before the key; else ``--trust-snapshot``)."""
    from ..snapshot import integrity

    if not db:
        return integrity.configured_key()
    from ..catalog import MetadataStore
    from ..checkpoint.trust import SnapshotTrust

    with MetadataStore(db) as store:
        trust = SnapshotTrust(store, trust_snapshot=trust_snapshot)
        if source is not None:
            trust.load(source)
        return trust.key


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
