"""``ckpt cdc``: the replication slot and publication of a PostgreSQL CDC job."""

from __future__ import annotations

import click

from ..settings import CDC_URL, METADATA_URL
from .common import _echo_json, echo, load_pipeline, main


@main.group()
def cdc() -> None:
    """PostgreSQL change data capture (PostgresCdcSource)."""


@cdc.command("drop-slot")
@click.option("--url", envvar=CDC_URL.name, required=True,
              help="the source database, postgresql://user@host:port/db ($CKPT_CDC_URL)")
@click.option("--job-name", default=None, help="the job whose default slot (ckpt_<job name>_<hash>) to drop")
@click.option("--slot", default=None, help="the slot's name, if the source set slot=")
@click.option("--publication", default=None,
              help="the publication to drop too (default: the slot's name)")
@click.option("--keep-publication", is_flag=True, help="drop the slot only")
@click.option("--db", "metadata_url", envvar=METADATA_URL.name,
              default=None, help="also forget the slot's owning job in this metadata DB")
def drop_slot(url: str, job_name: str | None, slot: str | None, publication: str | None,
              keep_publication: bool, metadata_url: str | None) -> None:
    """Drop a CDC job's replication slot (and publication). Stop the job first: its next
    start takes a new snapshot. Dropping what does not exist is not an error."""
    from ..connectors.postgres.cdc.source import drop_slot as drop
    from ..connectors.postgres.cdc.source import job_object_name

    if (job_name is None) == (slot is None):
        raise click.UsageError("give --job-name or --slot")
    name = slot or job_object_name(job_name or "")
    done = drop(url, name, None if keep_publication else (publication or name),
                metadata_url=metadata_url)
    echo("dropped " + ", ".join(done) if done else f"nothing to drop for {name}")


@cdc.command("copy-slot")
@click.option("--url", envvar=CDC_URL.name, required=True,
              help="the source database, postgresql://user@host:port/db ($CKPT_CDC_URL)")
@click.option("--from", "source", required=True, help="blue's slot (or --from-job)")
@click.option("--to", "target", default=None, help="green's slot (default: --to-job's)")
@click.option("--to-job", default=None, help="the green job whose default slot to create")
def copy_slot(url: str, source: str, target: str | None, to_job: str | None) -> None:
    """Blue-green hand-over of a CDC job: create green's slot as a copy of blue's. Run it
    BEFORE blue's hand-over savepoint (or before picking blue's latest checkpoint)."""
    from ..connectors.postgres.cdc.slots import copy_slot as copy
    from ..connectors.postgres.cdc.slots import job_object_name

    if (target is None) == (to_job is None):
        raise click.UsageError("give --to or --to-job")
    name = target or job_object_name(to_job or "")
    echo(f"created slot {name} from {source} at {copy(url, source, name)}")


@cdc.command("copy-slots")
@click.argument("pipeline")
@click.option("--from-job", "blue_job", required=True, help="blue's job name")
@click.option("--to-job", "green_job", required=True, help="green's job name")
@click.option("--json", "as_json", is_flag=True)
def copy_slots(pipeline: str, blue_job: str, green_job: str, as_json: bool) -> None:
    """Blue-green hand-over: for every PostgresCdcSource of green's PIPELINE
    (module:function), create green's slot as a copy of blue's. Idempotent (a green slot not
    past blue's is kept); nothing to do without a CDC source. Run it BEFORE blue's
    hand-over savepoint (the blue_green_upgrade DAG does: task copy_cdc_slots)."""
    from ..connectors.postgres.cdc.handover import copy_slots as copy

    done = copy(load_pipeline(pipeline).execution_graph(), blue_job=blue_job,
                green_job=green_job)
    if as_json:
        _echo_json(done)
        return
    for d in done:
        echo(f"source {d['uid']}: {d['status']} slot {d['to']} from {d['from']} at "
             f"{d['position']}")
    if not done:
        echo(f"{pipeline} has no PostgreSQL CDC source: no slot to copy")
