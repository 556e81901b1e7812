"""The learning cache: evidence, user commands, facets, per-user rebuild index, checkpoints.

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
    # frozen: what habitus.projection.checkpoints.checkpoint_ddl("learning") produced at this
    # revision
    op.execute("CREATE SCHEMA IF NOT EXISTS learning")
    op.execute("""CREATE TABLE IF NOT EXISTS learning.projection_checkpoints (
            projection text PRIMARY KEY,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("ALTER TABLE learning.projection_checkpoints "
               "ADD COLUMN IF NOT EXISTS emitted_seq bigint NOT NULL DEFAULT 0")
    op.execute("""
        CREATE TABLE learning.evidence (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            event_id text NOT NULL,
            seq bigint NOT NULL,
            class text NOT NULL,
            key text NOT NULL,
            value text NOT NULL,
            cue_family text NOT NULL,
            observed_at double precision NOT NULL,
            confidence real NOT NULL,
            producer text NOT NULL,
            refs jsonb NOT NULL DEFAULT '[]',
            PRIMARY KEY (tenant_id, user_id, event_id)
        )""")
    # Reads are per user (the primary key's prefix); no other index slows the intake down.
    op.execute("""
        CREATE TABLE learning.commands (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            event_id text NOT NULL,
            seq bigint NOT NULL,
            kind text NOT NULL,
            class text,
            key text,
            value text,
            at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, event_id)
        )""")
    op.execute("""
        CREATE TABLE learning.facets (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            class text NOT NULL,
            key text NOT NULL,
            value text NOT NULL,
            state text NOT NULL,
            stability double precision,
            user_state text NOT NULL,
            evidence_refs jsonb NOT NULL DEFAULT '[]',
            cue_counts jsonb NOT NULL DEFAULT '{}',
            evidence_count integer NOT NULL DEFAULT 0,
            first_seen_at double precision,
            last_evidence_at double precision,
            next_change_at double precision,
            as_of double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, class, key)
        )""")
    op.execute("""
        CREATE TABLE learning.users (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            dirty boolean NOT NULL DEFAULT false,
            last_candidate_at double precision,
            last_as_of double precision,
            next_due_at double precision,
            PRIMARY KEY (tenant_id, user_id)
        )""")
    op.execute("CREATE INDEX users_next_due ON learning.users (next_due_at) "
               "WHERE next_due_at IS NOT NULL")
    op.execute("CREATE INDEX users_dirty ON learning.users (last_candidate_at) WHERE dirty")


def downgrade() -> None:
    for table in ("users", "facets", "commands", "evidence", "projection_checkpoints"):
        op.execute(f"DROP TABLE IF EXISTS learning.{table}")
