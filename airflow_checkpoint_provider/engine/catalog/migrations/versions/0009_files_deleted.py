"""Whether a subsumed checkpoint's files were deleted.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27

* ``checkpoints.files_deleted``: set once the coordinator deleted the files of a SUBSUMED
  checkpoint. A SUBSUMED row without it still has its files: a pin holds them (see
  ``savepoint_pins``), or the driver died before its cleaner deleted them. The next job of
  the name adopts those rows at its start (``engine/checkpoint/held.py``): it keeps the
  pinned ones and deletes the others. Rows subsumed before this revision are marked deleted
  (what SUBSUMED meant until now).

Frozen: does not import the models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(
            sa.Column("files_deleted", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.execute(
        sa.text("UPDATE checkpoints SET files_deleted = :yes WHERE status = 'SUBSUMED'").bindparams(
            sa.bindparam("yes", True, type_=sa.Boolean())
        )
    )


def downgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("files_deleted")
