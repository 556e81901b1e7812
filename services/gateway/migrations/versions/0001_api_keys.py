"""API keys, stored hashed, one tenant each.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("key_hash", sa.String(64), primary_key=True),
        sa.Column("key_prefix", sa.String(16), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("is_admin", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("label", sa.String(200), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        schema="gateway",
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"], schema="gateway")
    op.create_index("ix_api_keys_key_prefix", "api_keys", ["key_prefix"], schema="gateway")


def downgrade() -> None:
    op.drop_table("api_keys", schema="gateway")
