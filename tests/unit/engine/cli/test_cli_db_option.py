"""Every ``ckpt`` command takes ``--db`` (issue 54 item 6): the test walks the click tree, so a
command added without it fails here. The exceptions are named with their reason."""

from __future__ import annotations

import click

from airflow_checkpoint_provider.engine.cli import main as ckpt

#: commands that neither read nor write a metadata DB nor a snapshot: they work on a CDC
#: source database only (its replication slots), so a --db would have nothing to do
NO_METADATA_DB = {("cdc", "copy-slot"), ("cdc", "copy-slots")}


def _leaves(cmd: click.Command, path: tuple[str, ...] = ()):
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _leaves(sub, (*path, name))
    else:
        yield path, cmd


def test_every_command_takes_db_and_reads_it_from_the_environment():
    leaves = list(_leaves(ckpt))
    assert len(leaves) > 20  # the walk found the tree
    missing = []
    for path, cmd in leaves:
        if path in NO_METADATA_DB:
            continue
        db = next((p for p in cmd.params if "--db" in getattr(p, "opts", ())), None)
        if db is None:
            missing.append(" ".join(path))
        else:
            assert db.envvar == "CKPT_METADATA_URL", path
    assert not missing, f"commands without --db: {missing}"
    assert ("verify-restore",) in {p for p, _ in leaves}
