"""``ckpt db``: metadata DB administration."""

from __future__ import annotations

from .common import _db_url, db_option, echo, main


@main.group()
def db() -> None:
    """Metadata DB administration."""


@db.command("upgrade")
@db_option
def db_upgrade(db: str | None) -> None:
    """Create or migrate the metadata DB schema to the newest revision."""
    from ..catalog import to_sqlalchemy_url, upgrade_database

    upgrade_database(_db_url(db))
    from ..catalog import redacted_url

    echo(f"metadata DB at {redacted_url(to_sqlalchemy_url(_db_url(db)))} is up to date")
