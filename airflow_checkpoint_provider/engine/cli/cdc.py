"""``ckpt cdc``: the replication slot and publication of a PostgreSQL CDC job."""

from __future__ import annotations

import click

from .common import echo, main


@main.group()
def cdc() -> None:
    """PostgreSQL change data capture (PostgresCdcSource)."""


@cdc.command("drop-slot")
@click.option("--url", envvar="CKPT_CDC_URL", required=True,
              help="the source database, postgresql://user@host:port/db ($CKPT_CDC_URL)")
@click.option("--job-name", default=None, help="the job whose default slot (ckpt_<job name>) to drop")
@click.option("--slot", default=None, help="the slot's name, if the source set slot=")
@click.option("--publication", default=None,
              help="the publication to drop too (default: the slot's name)")
@click.option("--keep-publication", is_flag=True, help="drop the slot only")
def drop_slot(url: str, job_name: str | None, slot: str | None, publication: str | None,
              keep_publication: bool) -> None:
    """Drop a CDC job's replication slot (and publication). Stop the job first: its next
    start takes a new snapshot. Dropping what does not exist is not an error."""
    from ..connectors.postgres_cdc import drop_slot as drop
    from ..connectors.postgres_cdc import job_object_name

    if (job_name is None) == (slot is None):
        raise click.UsageError("give --job-name or --slot")
    name = slot or job_object_name(job_name or "")
    done = drop(url, name, None if keep_publication else (publication or name))
    echo("dropped " + ", ".join(done) if done else f"nothing to drop for {name}")
