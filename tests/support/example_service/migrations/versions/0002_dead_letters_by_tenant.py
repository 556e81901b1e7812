"""Dead letters keyed by tenant first, like every other table holding a tenant's data: the
tenant is the column a sharded deployment distributes on, and a primary key without it could
not be enforced across shards. A dead letter whose event named no readable tenant (bytes that
were never an event) is recorded under the empty tenant.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-05
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE example.dead_letters SET tenant_id = '' WHERE tenant_id IS NULL")
    op.execute("ALTER TABLE example.dead_letters ALTER COLUMN tenant_id SET DEFAULT ''")
    op.execute("ALTER TABLE example.dead_letters ALTER COLUMN tenant_id SET NOT NULL")
    op.execute("ALTER TABLE example.dead_letters DROP CONSTRAINT dead_letters_pkey")
    op.execute("ALTER TABLE example.dead_letters "
               "ADD CONSTRAINT dead_letters_pkey PRIMARY KEY (tenant_id, projection, seq)")
    # a waiting command asks by (projection, seq), not knowing whose event failed
    op.execute("CREATE INDEX IF NOT EXISTS dead_letters_by_seq "
               "ON example.dead_letters (projection, seq)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS example.dead_letters_by_seq")
    op.execute("ALTER TABLE example.dead_letters DROP CONSTRAINT dead_letters_pkey")
    op.execute("ALTER TABLE example.dead_letters "
               "ADD CONSTRAINT dead_letters_pkey PRIMARY KEY (projection, seq)")
    op.execute("ALTER TABLE example.dead_letters ALTER COLUMN tenant_id DROP NOT NULL")
    op.execute("ALTER TABLE example.dead_letters ALTER COLUMN tenant_id DROP DEFAULT")
    op.execute("UPDATE example.dead_letters SET tenant_id = NULL WHERE tenant_id = ''")
