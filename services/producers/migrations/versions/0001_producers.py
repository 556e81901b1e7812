"""Per-session heuristic state and the producers' checkpoint.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # frozen: what habitus.projection.checkpoints.checkpoint_ddl("producers") produced at this
    # revision
    op.execute("CREATE SCHEMA IF NOT EXISTS producers")
    op.execute("""CREATE TABLE IF NOT EXISTS producers.projection_checkpoints (
            projection text PRIMARY KEY,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("ALTER TABLE producers.projection_checkpoints "
               "ADD COLUMN IF NOT EXISTS emitted_seq bigint NOT NULL DEFAULT 0")
    op.execute("""
        CREATE TABLE producers.sessions (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            session_id text NOT NULL,
            state jsonb NOT NULL,
            last_seq bigint NOT NULL,
            PRIMARY KEY (tenant_id, user_id, session_id)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS producers.sessions")
    op.execute("DROP TABLE IF EXISTS producers.projection_checkpoints")
