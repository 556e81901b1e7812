"""A role on every API key: `tenant-admin` (tenant-wide law, routing, settings, erasure) or
`agent` (ingest, per-user reads and commands). Every key that existed could do everything, and
the integrations holding them may rely on it, so each is migrated to `tenant-admin`; keys made
from now on say their role.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE gateway.api_keys ADD COLUMN role VARCHAR(32) "
               "NOT NULL DEFAULT 'tenant-admin'")
    op.execute("ALTER TABLE gateway.api_keys ALTER COLUMN role SET DEFAULT 'agent'")
    op.execute("ALTER TABLE gateway.api_keys ADD CONSTRAINT api_keys_role_known "
               "CHECK (role IN ('tenant-admin', 'agent'))")


def downgrade() -> None:
    op.execute("ALTER TABLE gateway.api_keys DROP COLUMN role")
