"""Whose event each dead letter was (tenant and user), so erasing a user erases the records of
their dead letters too. Rows from before stay without an owner.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE producers.dead_letters ADD COLUMN IF NOT EXISTS tenant_id text")
    op.execute("ALTER TABLE producers.dead_letters ADD COLUMN IF NOT EXISTS user_id text")
    op.execute("CREATE INDEX IF NOT EXISTS dead_letters_by_user "
               "ON producers.dead_letters (tenant_id, user_id)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS producers.dead_letters_by_user")
    op.execute("ALTER TABLE producers.dead_letters DROP COLUMN IF EXISTS user_id")
    op.execute("ALTER TABLE producers.dead_letters DROP COLUMN IF EXISTS tenant_id")
