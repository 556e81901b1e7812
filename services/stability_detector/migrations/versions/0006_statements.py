"""Statements and origins: each evidence row keeps how the user meant a statement (`stance`)
and its sentence; each facet keeps why it holds its value (`origin`).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE learning.evidence ADD COLUMN IF NOT EXISTS stance text")
    op.execute("ALTER TABLE learning.evidence ADD COLUMN IF NOT EXISTS sentence text")
    op.execute("ALTER TABLE learning.facets ADD COLUMN IF NOT EXISTS origin text "
               "NOT NULL DEFAULT 'learned'")


def downgrade() -> None:
    op.execute("ALTER TABLE learning.facets DROP COLUMN IF EXISTS origin")
    op.execute("ALTER TABLE learning.evidence DROP COLUMN IF EXISTS sentence")
    op.execute("ALTER TABLE learning.evidence DROP COLUMN IF EXISTS stance")
