"""The extractor's windows and material (folded from the ingest stream), its re-extraction
requests, the LLM's stored answers, the quarantine, the rolling summaries and the LLM budget.

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
    op.execute("CREATE SCHEMA IF NOT EXISTS extractor")
    op.execute("""CREATE TABLE IF NOT EXISTS extractor.projection_checkpoints (
            projection text PRIMARY KEY,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS extractor.applied_events (
            projection text NOT NULL,
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            event_id text NOT NULL,
            seq bigint NOT NULL,
            PRIMARY KEY (projection, tenant_id, user_id, event_id)
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS extractor.dead_letters (
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
               "ON extractor.dead_letters (tenant_id, user_id)")
    # A source's window still filling: its material, in stream order.
    op.execute("""CREATE TABLE extractor.open_windows (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            source text NOT NULL,
            opened_seq bigint NOT NULL,
            opened_at double precision NOT NULL,
            tokens integer NOT NULL,
            chunks jsonb NOT NULL,
            PRIMARY KEY (tenant_id, user_id, source)
        )""")
    op.execute("CREATE INDEX open_windows_by_age ON extractor.open_windows (opened_at)")
    # Closed windows; `state` and what follows it are the worker's bookkeeping (a replay
    # starts them over, and the worker then reuses the stored answers).
    op.execute("""CREATE TABLE extractor.windows (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            window_id text NOT NULL,
            source text NOT NULL,
            kind text NOT NULL,
            opened_seq bigint NOT NULL,
            closed_seq bigint NOT NULL,
            closed_at double precision NOT NULL,
            closed_by text NOT NULL,
            tokens integer NOT NULL,
            chunks jsonb NOT NULL,
            state text NOT NULL DEFAULT 'ready',
            attempts integer NOT NULL DEFAULT 0,
            next_attempt_at double precision NOT NULL DEFAULT 0,
            last_error text,
            PRIMARY KEY (tenant_id, user_id, window_id)
        )""")
    op.execute("CREATE INDEX windows_ready ON extractor.windows "
               "(tenant_id, user_id, source, kind, closed_seq) WHERE state <> 'done'")
    op.execute("""CREATE TABLE extractor.reflection_counts (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            session_id text NOT NULL,
            reflections integer NOT NULL,
            PRIMARY KEY (tenant_id, user_id, session_id)
        )""")
    op.execute("""CREATE TABLE extractor.reextract_requests (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            seq bigint NOT NULL,
            since double precision NOT NULL,
            prompt_version text NOT NULL,
            source text,
            handled boolean NOT NULL DEFAULT false,
            PRIMARY KEY (tenant_id, user_id, seq)
        )""")
    # The LLM's answers, kept across replays: a window is never sent twice for one prompt.
    op.execute("""CREATE TABLE extractor.extractions (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            window_id text NOT NULL,
            prompt_version text NOT NULL,
            model text NOT NULL,
            raw_output text NOT NULL,
            result jsonb NOT NULL,
            tokens_in integer NOT NULL,
            tokens_out integer NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, window_id, prompt_version)
        )""")
    op.execute("""CREATE TABLE extractor.quarantine (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            window_id text NOT NULL,
            prompt_version text NOT NULL,
            idx integer NOT NULL,
            source text NOT NULL,
            reason text NOT NULL,
            detail text NOT NULL,
            raw jsonb,
            created_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, window_id, prompt_version, idx)
        )""")
    op.execute("""CREATE TABLE extractor.sources (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            source text NOT NULL,
            summary text NOT NULL,
            window_id text NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, source)
        )""")
    # The LLM client's budget table (habitus.llm.budget.usage_table_sql), as it stood.
    op.execute("""CREATE TABLE IF NOT EXISTS extractor.llm_usage (
            tenant_id text NOT NULL,
            day date NOT NULL,
            calls bigint NOT NULL DEFAULT 0,
            tokens_in bigint NOT NULL DEFAULT 0,
            tokens_out bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, day)
        )""")


def downgrade() -> None:
    for table in ("llm_usage", "sources", "quarantine", "extractions", "reextract_requests",
                  "reflection_counts", "windows", "open_windows", "dead_letters",
                  "applied_events", "projection_checkpoints"):
        op.execute(f"DROP TABLE IF EXISTS extractor.{table}")
