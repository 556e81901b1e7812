"""Tracking beside the checkpoint: the event ids each projection applied (so a copy re-published
past the stream's duplicate window changes nothing) and the sequences it dead-lettered (so a
waiting command can answer with the reason).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from alembic import op

from habitus.db.checkpoints import tracking_ddl

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for statement in tracking_ddl("learning"):
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS learning.applied_events")
    op.execute("DROP TABLE IF EXISTS learning.dead_letters")
