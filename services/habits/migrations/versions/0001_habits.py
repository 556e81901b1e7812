"""The habit ledger and its audit, duplicate pairs, tenants' law and settings, captured
observations, Analyze's watermarks, stored answers and quarantine, and the projections'
bookkeeping.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS habits")
    op.execute("""CREATE TABLE IF NOT EXISTS habits.projection_checkpoints (
            projection text PRIMARY KEY,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS habits.applied_events (
            projection text NOT NULL,
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            event_id text NOT NULL,
            seq bigint NOT NULL,
            PRIMARY KEY (projection, tenant_id, user_id, event_id)
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS habits.dead_letters (
            projection text NOT NULL,
            seq bigint NOT NULL,
            event_id text,
            reason text NOT NULL,
            detail text NOT NULL,
            dead_at timestamptz NOT NULL DEFAULT now(),
            tenant_id text,
            user_id text,
            PRIMARY KEY (projection, seq)
        )""")
    op.execute("CREATE INDEX IF NOT EXISTS dead_letters_by_user "
               "ON habits.dead_letters (tenant_id, user_id)")
    # The ledger: each habit as the fold of its events (`state` is the checksummed whole).
    op.execute("""CREATE TABLE habits.habits (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            habit_id text NOT NULL,
            status text NOT NULL,
            confidence_bp integer NOT NULL,
            law_hash text,
            checksum text NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            state jsonb NOT NULL,
            PRIMARY KEY (tenant_id, user_id, habit_id)
        )""")
    op.execute("CREATE INDEX habits_by_status ON habits.habits (tenant_id, status)")
    # Every change, before and after.
    op.execute("""CREATE TABLE habits.audit (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            habit_id text NOT NULL,
            event_id text NOT NULL,
            event_type text NOT NULL,
            seq bigint NOT NULL,
            at double precision NOT NULL,
            actor text NOT NULL,
            before jsonb,
            after jsonb,
            PRIMARY KEY (tenant_id, user_id, habit_id, event_id)
        )""")
    op.execute("""CREATE TABLE habits.duplicates (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            first_id text NOT NULL,
            second_id text NOT NULL,
            similarity_bp integer NOT NULL,
            strong boolean NOT NULL,
            decision text NOT NULL DEFAULT 'pending',
            updated_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, first_id, second_id)
        )""")
    # Tenant-wide rows are stored under the reserved user `_tenant`.
    op.execute("""CREATE TABLE habits.laws (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            text text NOT NULL,
            law_hash text NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id)
        )""")
    op.execute("""CREATE TABLE habits.tenant_settings (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            retention_days integer NOT NULL,
            scheduled_analyze boolean NOT NULL,
            project_names text[] NOT NULL DEFAULT '{}',
            updated_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id)
        )""")
    # Captured, redacted turns: the only raw text outside the ingest stream; they expire.
    op.execute("""CREATE TABLE habits.observations (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            seq bigint NOT NULL,
            event_id text NOT NULL,
            session_id text NOT NULL,
            turn_id text NOT NULL,
            day text NOT NULL,
            text text NOT NULL,
            bytes integer NOT NULL,
            checksum text NOT NULL,
            observed_at double precision NOT NULL,
            expires_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, seq)
        )""")
    op.execute("CREATE INDEX observations_by_expiry ON habits.observations (expires_at)")
    op.execute("""CREATE TABLE habits.watermarks (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            analyzed_seq bigint NOT NULL,
            batches bigint NOT NULL DEFAULT 0,
            last_run_at double precision,
            updated_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id)
        )""")
    # The model's answer for a batch, kept so a retried batch reuses it (same proposals).
    op.execute("""CREATE TABLE habits.answers (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            first_seq bigint NOT NULL,
            last_seq bigint NOT NULL,
            prompt_version text NOT NULL,
            model text NOT NULL,
            answer jsonb NOT NULL,
            answered_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, first_seq, last_seq, prompt_version)
        )""")
    op.execute("""CREATE TABLE habits.quarantine (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            first_seq bigint NOT NULL,
            last_seq bigint NOT NULL,
            position integer NOT NULL,
            reason text NOT NULL,
            item jsonb NOT NULL,
            model text NOT NULL,
            at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, first_seq, last_seq, position)
        )""")
    # The LLM client's budget table (habitus.llm.budget.usage_table_sql), as it stood: the
    # judge and Analyze share the tenant's daily budget.
    op.execute("""CREATE TABLE IF NOT EXISTS habits.llm_usage (
            tenant_id text NOT NULL,
            day date NOT NULL,
            calls bigint NOT NULL DEFAULT 0,
            tokens_in bigint NOT NULL DEFAULT 0,
            tokens_out bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, day)
        )""")


def downgrade() -> None:
    for table in ("llm_usage", "quarantine", "answers", "watermarks", "observations",
                  "tenant_settings", "laws", "duplicates", "audit", "habits", "dead_letters",
                  "applied_events", "projection_checkpoints"):
        op.execute(f"DROP TABLE IF EXISTS habits.{table}")
