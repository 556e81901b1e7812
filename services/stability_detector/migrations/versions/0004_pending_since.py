"""When each user's pending evidence started waiting (`pending_since`): the scheduler's maximum
wait counts from it, and `learning.list_facets` / `learning.cache_stats` report it.

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
    op.execute("ALTER TABLE learning.users ADD COLUMN IF NOT EXISTS pending_since "
               "double precision")
    # users already waiting: their newest candidate is the best bound known
    op.execute("UPDATE learning.users SET pending_since = last_candidate_at "
               "WHERE dirty AND pending_since IS NULL")
    # the scheduler's max-wait half (the debounce half uses users_dirty); both cover dirty
    # users only, so the tick stays cheap however many users are clean
    op.execute("CREATE INDEX IF NOT EXISTS users_pending ON learning.users (pending_since) "
               "WHERE dirty")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS learning.users_pending")
    op.execute("ALTER TABLE learning.users DROP COLUMN IF EXISTS pending_since")
