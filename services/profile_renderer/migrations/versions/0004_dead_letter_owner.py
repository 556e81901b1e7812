"""Whose event each dead letter was (tenant and user), so erasing a user erases the records of
their dead letters too. Rows from before stay without an owner.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE profile.dead_letters ADD COLUMN IF NOT EXISTS tenant_id text")
    op.execute("ALTER TABLE profile.dead_letters ADD COLUMN IF NOT EXISTS user_id text")
    op.execute("CREATE INDEX IF NOT EXISTS dead_letters_by_user "
               "ON profile.dead_letters (tenant_id, user_id)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS profile.dead_letters_by_user")
    op.execute("ALTER TABLE profile.dead_letters DROP COLUMN IF EXISTS user_id")
    op.execute("ALTER TABLE profile.dead_letters DROP COLUMN IF EXISTS tenant_id")
