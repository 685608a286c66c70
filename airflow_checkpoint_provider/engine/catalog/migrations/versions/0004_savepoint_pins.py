"""Savepoint pins: savepoints that retention and dispose must keep.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

* ``savepoint_pins``: one row per (savepoint location, holder), with an optional expiry.
  A pending upgrade (or a user) pins the savepoint it will restore from; savepoint
  retention and ``ckpt dispose`` keep a savepoint while it has an unexpired pin.

Frozen: does not import the models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "savepoint_pins",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True,
                  nullable=False),
        sa.Column("location", sa.String(1024), nullable=False),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("expires_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_savepoint_pins"),
        sa.UniqueConstraint("location", "holder", name="uq_savepoint_pins_location_holder"),
    )


def downgrade() -> None:
    op.drop_table("savepoint_pins")
