"""Capture keeps the tool and text of each rule it made, and whether the user's words may lift
it (an edict, not a repeated failure), so that "You can email Sarah again" finds "Never email
Sarah". Rows made before are filled from the rules view where the rule is still there (its
text sealed with the same column key, so copied as it is).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""ALTER TABLE tools.captured
        ADD COLUMN tool_name text,
        ADD COLUMN rule text,
        ADD COLUMN liftable boolean NOT NULL DEFAULT false""")
    op.execute("""UPDATE tools.captured c
        SET tool_name = r.tool_name, rule = r.rule, liftable = (r.source = 'user_explicit')
        FROM tools.rules r
        WHERE r.tenant_id = c.tenant_id AND r.user_id = c.user_id AND r.rule_id = c.rule_id""")


def downgrade() -> None:
    op.execute("""ALTER TABLE tools.captured
        DROP COLUMN liftable, DROP COLUMN rule, DROP COLUMN tool_name""")
