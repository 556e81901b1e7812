"""Tracking beside the checkpoint: the event ids each projection applied (so a copy re-published
past the stream's duplicate window changes nothing) and the sequences it dead-lettered (so a
waiting command can answer with the reason).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from alembic import op

from habitus.db.checkpoints import tracking_ddl

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for statement in tracking_ddl("profile"):
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS profile.applied_events")
    op.execute("DROP TABLE IF EXISTS profile.dead_letters")
