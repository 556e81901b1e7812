"""Partitions: a projection's checkpoint is kept per partition (its count and index, its
state while it is repartitioned, the replica that claimed it), and the replicas of the service
sharing the partitions renew their leases in `projection_members`. Existing checkpoints become
partition 0 of 1, so a projection goes on exactly where it was.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # frozen: what habitus.projection.checkpoints.partitions_migration("profile") produced at
    # this revision
    op.execute("""ALTER TABLE profile.projection_checkpoints
        ADD COLUMN parts smallint NOT NULL DEFAULT 1,
        ADD COLUMN part smallint NOT NULL DEFAULT 0,
        ADD COLUMN state text NOT NULL DEFAULT 'active',
        ADD COLUMN cutover_seq bigint,
        ADD COLUMN owner text""")
    op.execute("""ALTER TABLE profile.projection_checkpoints
        DROP CONSTRAINT projection_checkpoints_pkey,
        ADD CONSTRAINT projection_checkpoints_pkey PRIMARY KEY (projection, parts, part)""")
    op.execute("""CREATE TABLE IF NOT EXISTS profile.projection_members (
            member text PRIMARY KEY,
            host text NOT NULL DEFAULT '',
            pid integer NOT NULL DEFAULT 0,
            joined_at timestamptz NOT NULL DEFAULT now(),
            lease_until timestamptz NOT NULL
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS profile.projection_members")
    # back to one row per projection: the lowest partition's position (nothing skipped)
    op.execute("""DELETE FROM profile.projection_checkpoints c
        USING profile.projection_checkpoints o
        WHERE c.projection = o.projection
          AND (c.last_seq, c.parts, c.part) > (o.last_seq, o.parts, o.part)""")
    op.execute("""ALTER TABLE profile.projection_checkpoints
        DROP CONSTRAINT projection_checkpoints_pkey,
        ADD CONSTRAINT projection_checkpoints_pkey PRIMARY KEY (projection),
        DROP COLUMN parts, DROP COLUMN part, DROP COLUMN state, DROP COLUMN cutover_seq,
        DROP COLUMN owner""")
