"""The snapshot signing key of the metadata DB.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07

* ``snapshot_keys``: one row (``key_id`` 1) holding a random 32-byte HMAC-SHA256 key that
  signs every ``_metadata`` the DB's jobs write, and its ``created_at``. The row is not
  created here: the first job (or ``ckpt``) that needs the key inserts it if absent, so
  concurrent creators read the same key. Checkpoints recorded COMPLETED before
  ``created_at`` (written by the engine before this revision, unsigned) are still accepted
  by ``--restore latest`` and by path.

Frozen: does not import the models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "snapshot_keys",
        sa.Column("key_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("key", sa.LargeBinary(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key_id", name="pk_snapshot_keys"),
    )


def downgrade() -> None:
    op.drop_table("snapshot_keys")
