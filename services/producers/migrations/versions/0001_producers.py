"""Per-session heuristic state and the producers' checkpoint.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from alembic import op

from habitus.db.checkpoints import checkpoint_ddl

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    for statement in checkpoint_ddl("producers"):
        op.execute(statement)
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
