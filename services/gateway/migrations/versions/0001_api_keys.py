"""API keys, stored hashed, one tenant each.

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
    # frozen: the SQL the SQLAlchemy `op.create_table` / `op.create_index` calls of this revision
    # rendered for PostgreSQL
    op.execute("""
        CREATE TABLE gateway.api_keys (
            key_hash VARCHAR(64) NOT NULL,
            key_prefix VARCHAR(16) NOT NULL,
            tenant_id VARCHAR(64) NOT NULL,
            is_admin BOOLEAN DEFAULT false NOT NULL,
            label VARCHAR(200) DEFAULT '' NOT NULL,
            created_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
            revoked_at TIMESTAMP WITH TIME ZONE,
            PRIMARY KEY (key_hash)
        )""")
    op.execute("CREATE INDEX ix_api_keys_tenant_id ON gateway.api_keys (tenant_id)")
    op.execute("CREATE INDEX ix_api_keys_key_prefix ON gateway.api_keys (key_prefix)")


def downgrade() -> None:
    op.execute("DROP TABLE gateway.api_keys")
