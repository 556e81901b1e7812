"""The tenants' routing policies: the default each tenant chose, and each learned policy's
latest parameters and version (folded from `RoutingPolicyUpdated`). They belong to the tenant:
their events ride on the tenant's `_tenant` subject, and `user_id` is always `_tenant`, so
erasing a user never touches them.

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
    op.execute("""
        CREATE TABLE traces.policies (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            policy text NOT NULL,
            version integer NOT NULL,
            parameters jsonb NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, policy)
        )""")
    op.execute("""
        CREATE TABLE traces.defaults (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            policy text NOT NULL,
            version integer NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS traces.defaults")
    op.execute("DROP TABLE IF EXISTS traces.policies")
