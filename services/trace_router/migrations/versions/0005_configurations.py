"""The tenants' configurations as routing follows them (folded from `ConfigurationApplied`: the
latest version's settings, replaced whole by each newer version), and the traces by query class
for the class filter of the trace queries.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE traces.configurations (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            version integer NOT NULL,
            params jsonb NOT NULL,
            applied_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id)
        )""")
    op.execute("CREATE INDEX traces_by_class ON traces.traces "
               "(tenant_id, query_class, started_at)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS traces.traces_by_class")
    op.execute("DROP TABLE IF EXISTS traces.configurations")
