"""Why each active facet holds its value (`origin`: PROFILE.md and the prompt mark the ones the
user set), and the facets not yet sure, which PROFILE.md lists for the user to settle and a
prompt may ask about. Rows from before this revision read as learned, which is what the
renderer showed them as; the not-yet-sure list fills with the user's next `CacheRebuilt`.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-15
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE profile.facets "
               "ADD COLUMN IF NOT EXISTS origin text NOT NULL DEFAULT 'learned'")
    op.execute("""
        CREATE TABLE IF NOT EXISTS profile.provisional_facets (
            tenant_id text NOT NULL, user_id text NOT NULL,
            class text NOT NULL, key text NOT NULL, value text NOT NULL,
            stability double precision NOT NULL,
            evidence text[] NOT NULL DEFAULT '{}',
            PRIMARY KEY (tenant_id, user_id, class, key))""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS profile.provisional_facets")
    op.execute("ALTER TABLE profile.facets DROP COLUMN IF EXISTS origin")
