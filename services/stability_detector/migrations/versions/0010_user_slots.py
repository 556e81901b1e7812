"""Each user's slot (the bucket its messages are stored under, `habitus.subjects.slot_of`) kept
on `learning.users`, so a periodic rebuild requested for one slot reads that slot's due users
only: a partition of the learning cache rebuilds its own users and no other partition's.

`learning.slot_of` is the streams' partition function (FNV-1a of tenant and user, 16 buckets)
in SQL; the column is generated from it, so every insert keeps it and existing rows get it now.
A test holds the function equal to `slot_of` and to the server's own partitioning.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""CREATE FUNCTION learning.slot_of(tenant_id text, user_id text)
        RETURNS smallint LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
        DECLARE
          h bigint := 2166136261;
          b bytea := convert_to(tenant_id || user_id, 'UTF8');
        BEGIN
          FOR i IN 0 .. length(b) - 1 LOOP
            h := ((h # get_byte(b, i)) * 16777619) % 4294967296;
          END LOOP;
          RETURN (h % 16)::smallint;
        END $$""")
    op.execute("""ALTER TABLE learning.users ADD COLUMN slot smallint
        GENERATED ALWAYS AS (learning.slot_of(tenant_id, user_id)) STORED""")
    op.execute("CREATE INDEX users_slot_next_due ON learning.users (slot, next_due_at) "
               "WHERE next_due_at IS NOT NULL")
    op.execute("CREATE INDEX users_slot_dirty ON learning.users (slot) WHERE dirty")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS learning.users_slot_dirty")
    op.execute("DROP INDEX IF EXISTS learning.users_slot_next_due")
    op.execute("ALTER TABLE learning.users DROP COLUMN slot")
    op.execute("DROP FUNCTION IF EXISTS learning.slot_of(text, text)")
