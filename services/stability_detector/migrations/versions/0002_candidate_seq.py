"""Remember the stream sequence of each user's latest candidate: the scheduler derives its
debounce event ids from it (a client-supplied time could repeat).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE learning.users ADD COLUMN IF NOT EXISTS last_candidate_seq bigint")


def downgrade() -> None:
    op.execute("ALTER TABLE learning.users DROP COLUMN IF EXISTS last_candidate_seq")
