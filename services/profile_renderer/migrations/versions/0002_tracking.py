"""Tracking beside the checkpoint: the event ids each projection applied (so a copy re-published
past the stream's duplicate window changes nothing) and the sequences it dead-lettered (so a
waiting command can answer with the reason).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # frozen: what habitus.projection.checkpoints.tracking_ddl("profile") produced at this
    # revision
    op.execute("""CREATE TABLE IF NOT EXISTS profile.applied_events (
            projection text NOT NULL,
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            event_id text NOT NULL,
            seq bigint NOT NULL,
            PRIMARY KEY (projection, tenant_id, user_id, event_id)
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS profile.dead_letters (
            projection text NOT NULL,
            seq bigint NOT NULL,
            event_id text,
            reason text NOT NULL,
            detail text NOT NULL,
            dead_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (projection, seq)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS profile.applied_events")
    op.execute("DROP TABLE IF EXISTS profile.dead_letters")
