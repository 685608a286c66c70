"""Alembic environment of the metadata DB.

There is no ``alembic.ini``: :func:`airflow_checkpoint_provider.engine.catalog.alembic_config`
builds the configuration in code. :func:`~airflow_checkpoint_provider.engine.catalog.upgrade_database`
passes an open connection (already inside a locked transaction) in
``config.attributes["connection"]``; otherwise ``sqlalchemy.url`` is used. To write a new
revision::

    from alembic import command
    from airflow_checkpoint_provider.engine.catalog import alembic_config
    command.revision(alembic_config("sqlite:////tmp/dev.db"), "add x", autogenerate=True)
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import create_engine, pool

from airflow_checkpoint_provider.engine.catalog.models import Base, UTCDateTime

config = context.config
target_metadata = Base.metadata


def _render_item(type_: str, obj: Any, autogen_context: Any) -> str | bool:
    # Revisions must not import the models: render our UTC type as its portable impl.
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _configure(**kwargs: Any) -> None:
    context.configure(
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite can only ALTER through table copies
        render_item=_render_item,  # type: ignore[arg-type]
        compare_type=True,
        **kwargs,
    )


def run_migrations_offline() -> None:
    _configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "", poolclass=pool.NullPool)
    with engine.connect() as connection:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
