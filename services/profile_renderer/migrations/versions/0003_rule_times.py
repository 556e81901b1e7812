"""Tool rules keep when they last changed (the prompt shows the newest first) and their scope
(`user`, or `tenant` for the rows of the reserved user `_tenant`). Rows from before this
revision read as updated at 0 and user-scoped, which is what they were.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-08
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE profile.tool_rules "
               "ADD COLUMN updated_at double precision NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE profile.tool_rules "
               "ADD COLUMN scope text NOT NULL DEFAULT 'user'")


def downgrade() -> None:
    op.execute("ALTER TABLE profile.tool_rules DROP COLUMN IF EXISTS scope")
    op.execute("ALTER TABLE profile.tool_rules DROP COLUMN IF EXISTS updated_at")
