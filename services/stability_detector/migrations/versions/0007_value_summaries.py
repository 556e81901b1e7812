"""Running summaries of each (class, key, value)'s evidence, so a rebuild folds in only what is
new: `learning.value_stats`; per user how far the summaries have come (`folded_seq`), the
evidence stamped after their time that waits for it (`deferred_seqs`) and the evidence window
they were folded for (`summary_window`); the value a pin or forget without one holds, recorded
once (`commands.held_value`); and an index to read a user's evidence from a log position.

A user without `folded_seq` (every user before this revision) is summarised from the log at
their next rebuild.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS learning.value_stats (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            class text NOT NULL,
            key text NOT NULL,
            value text NOT NULL,
            stats jsonb NOT NULL,
            -- apart from the rest: read only for the values a rebuild touches or shows
            refs jsonb NOT NULL DEFAULT '[]',
            PRIMARY KEY (tenant_id, user_id, class, key, value)
        )""")
    op.execute("ALTER TABLE learning.users ADD COLUMN IF NOT EXISTS folded_seq bigint")
    op.execute("ALTER TABLE learning.users ADD COLUMN IF NOT EXISTS deferred_seqs bigint[] "
               "NOT NULL DEFAULT '{}'")
    op.execute("ALTER TABLE learning.users ADD COLUMN IF NOT EXISTS summary_window "
               "double precision")
    op.execute("ALTER TABLE learning.commands ADD COLUMN IF NOT EXISTS held_value text")
    op.execute("ALTER TABLE learning.commands ADD COLUMN IF NOT EXISTS held_known boolean "
               "NOT NULL DEFAULT false")
    op.execute("CREATE INDEX IF NOT EXISTS evidence_user_seq "
               "ON learning.evidence (tenant_id, user_id, seq)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS learning.evidence_user_seq")
    op.execute("ALTER TABLE learning.commands DROP COLUMN IF EXISTS held_known")
    op.execute("ALTER TABLE learning.commands DROP COLUMN IF EXISTS held_value")
    for column in ("summary_window", "deferred_seqs", "folded_seq"):
        op.execute(f"ALTER TABLE learning.users DROP COLUMN IF EXISTS {column}")
    op.execute("DROP TABLE IF EXISTS learning.value_stats")
