"""The advice last issued to each tenant (the digest of `AdviceIssued`), so the relearn issues
advice only when it changed, on every replica and after a replay alike.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE traces.advice (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            digest text NOT NULL,
            issued_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS traces.advice")
