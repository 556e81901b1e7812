"""The example service's table and its projection bookkeeping.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS example")
    op.execute("""CREATE TABLE example.projection_checkpoints (
            projection text PRIMARY KEY,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now())""")
    op.execute("""CREATE TABLE example.applied_events (
            projection text NOT NULL, tenant_id text NOT NULL, user_id text NOT NULL,
            event_id text NOT NULL, seq bigint NOT NULL,
            PRIMARY KEY (projection, tenant_id, user_id, event_id))""")
    op.execute("""CREATE TABLE example.dead_letters (
            projection text NOT NULL, seq bigint NOT NULL, event_id text,
            reason text NOT NULL, detail text NOT NULL,
            dead_at timestamptz NOT NULL DEFAULT now(),
            tenant_id text, user_id text,
            PRIMARY KEY (projection, seq))""")
    op.execute("""CREATE TABLE example.pins (
            tenant_id text NOT NULL, user_id text NOT NULL, facet text NOT NULL,
            pins integer NOT NULL,
            PRIMARY KEY (tenant_id, user_id, facet))""")


def downgrade() -> None:
    op.execute("DROP SCHEMA example CASCADE")
