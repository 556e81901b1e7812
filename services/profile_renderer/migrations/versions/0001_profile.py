"""PROFILE.md versions and what they are rendered from; mirror bookkeeping; checkpoints.

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
    # frozen: what habitus.projection.checkpoints.checkpoint_ddl("profile") produced at this
    # revision
    op.execute("CREATE SCHEMA IF NOT EXISTS profile")
    op.execute("""CREATE TABLE IF NOT EXISTS profile.projection_checkpoints (
            projection text PRIMARY KEY,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("ALTER TABLE profile.projection_checkpoints "
               "ADD COLUMN IF NOT EXISTS emitted_seq bigint NOT NULL DEFAULT 0")
    op.execute("""
        CREATE TABLE profile.facets (
            tenant_id text NOT NULL, user_id text NOT NULL,
            class text NOT NULL, key text NOT NULL, value text NOT NULL,
            pinned boolean NOT NULL, stability double precision,
            PRIMARY KEY (tenant_id, user_id, class, key))""")
    op.execute("""
        CREATE TABLE profile.accounts (
            tenant_id text NOT NULL, user_id text NOT NULL,
            toolkit text NOT NULL, connection_id text NOT NULL, label text NOT NULL,
            PRIMARY KEY (tenant_id, user_id, toolkit, connection_id))""")
    op.execute("""
        CREATE TABLE profile.tool_rules (
            tenant_id text NOT NULL, user_id text NOT NULL, rule_id text NOT NULL,
            tool_name text NOT NULL, rule text NOT NULL, priority text NOT NULL,
            PRIMARY KEY (tenant_id, user_id, rule_id))""")
    op.execute("""
        CREATE TABLE profile.documents (
            tenant_id text NOT NULL, user_id text NOT NULL, version integer NOT NULL,
            markdown text NOT NULL, sha256 text NOT NULL,
            origin text NOT NULL, cause_event_id text NOT NULL,
            blocks_changed text[] NOT NULL DEFAULT '{}',
            PRIMARY KEY (tenant_id, user_id, version))""")
    op.execute("""
        CREATE TABLE profile.mirror (
            tenant_id text NOT NULL, user_id text NOT NULL,
            written_version integer NOT NULL, written_sha text NOT NULL,
            pending_sha text,
            PRIMARY KEY (tenant_id, user_id))""")


def downgrade() -> None:
    for table in ("mirror", "documents", "tool_rules", "accounts", "facets",
                  "projection_checkpoints"):
        op.execute(f"DROP TABLE IF EXISTS profile.{table}")
