"""The tool-scoped rules, capture's first-seen times, and the projections' bookkeeping.

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
    op.execute("CREATE SCHEMA IF NOT EXISTS tools")
    op.execute("""CREATE TABLE IF NOT EXISTS tools.projection_checkpoints (
            projection text PRIMARY KEY,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS tools.applied_events (
            projection text NOT NULL,
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            event_id text NOT NULL,
            seq bigint NOT NULL,
            PRIMARY KEY (projection, tenant_id, user_id, event_id)
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS tools.dead_letters (
            projection text NOT NULL,
            seq bigint NOT NULL,
            event_id text,
            reason text NOT NULL,
            detail text NOT NULL,
            dead_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (projection, seq)
        )""")
    op.execute("""
        CREATE TABLE tools.rules (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            rule_id text NOT NULL,
            tool_name text NOT NULL,
            rule text NOT NULL,
            priority text NOT NULL,
            source text NOT NULL,
            tags text[] NOT NULL DEFAULT '{}',
            scope text NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            causation text,
            PRIMARY KEY (tenant_id, user_id, rule_id)
        )""")
    op.execute("CREATE INDEX rules_by_tool ON tools.rules (tenant_id, user_id, tool_name)")
    op.execute("""
        CREATE TABLE tools.captured (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            rule_id text NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, rule_id)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS tools.captured")
    op.execute("DROP TABLE IF EXISTS tools.rules")
    op.execute("DROP TABLE IF EXISTS tools.dead_letters")
    op.execute("DROP TABLE IF EXISTS tools.applied_events")
    op.execute("DROP TABLE IF EXISTS tools.projection_checkpoints")
