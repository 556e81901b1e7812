"""The trace store: traces, their steps, feedback waiting for its trace, the aggregates the
analyzer and the routing policies read, and the projections' bookkeeping.

Every aggregate row is per user (`tenant_id, user_id, ...`): reads sum over the tenant's
users, and erasing a user deletes exactly that user's contribution. Sums are `numeric`, so they
are exact and do not depend on how events were batched (a replay in other batch sizes gives
identical rows).

Revision ID: 0001
Revises:
Create Date: 2026-12-10
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS traces")
    op.execute("""CREATE TABLE IF NOT EXISTS traces.projection_checkpoints (
            projection text PRIMARY KEY,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS traces.applied_events (
            projection text NOT NULL,
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            event_id text NOT NULL,
            seq bigint NOT NULL,
            PRIMARY KEY (projection, tenant_id, user_id, event_id)
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS traces.dead_letters (
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
               "ON traces.dead_letters (tenant_id, user_id)")

    op.execute("""
        CREATE TABLE traces.traces (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            trace_id text NOT NULL,
            seq bigint NOT NULL,
            query text NOT NULL,
            agent text NOT NULL,
            model text NOT NULL,
            engine text NOT NULL,
            result text NOT NULL,
            outcome text,
            feedback double precision,
            started_at double precision NOT NULL,
            ended_at double precision NOT NULL,
            total_tokens bigint NOT NULL,
            prompt_tokens bigint,
            completion_tokens bigint,
            total_latency_seconds double precision NOT NULL,
            cost_usd double precision,
            query_class text NOT NULL,
            tool_calls integer NOT NULL,
            step_count integer NOT NULL,
            reward double precision,
            search tsvector GENERATED ALWAYS AS (
                to_tsvector('simple'::regconfig, query || ' ' || result)) STORED,
            PRIMARY KEY (tenant_id, user_id, trace_id)
        )""")
    op.execute("CREATE INDEX traces_by_time ON traces.traces "
               "(tenant_id, started_at, user_id, trace_id)")
    op.execute("CREATE INDEX traces_by_user_time ON traces.traces "
               "(tenant_id, user_id, started_at, trace_id)")
    op.execute("CREATE INDEX traces_by_agent ON traces.traces "
               "(tenant_id, agent, started_at, user_id, trace_id)")
    op.execute("CREATE INDEX traces_by_model ON traces.traces "
               "(tenant_id, model, started_at, user_id, trace_id)")
    op.execute("CREATE INDEX traces_by_outcome ON traces.traces "
               "(tenant_id, outcome, started_at, user_id, trace_id)")
    op.execute("CREATE INDEX traces_by_id ON traces.traces (tenant_id, trace_id)")
    op.execute("CREATE INDEX traces_search ON traces.traces USING gin (search)")

    op.execute("""
        CREATE TABLE traces.steps (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            trace_id text NOT NULL,
            ordinal integer NOT NULL,
            step_type text NOT NULL,
            timestamp double precision NOT NULL,
            duration_seconds double precision NOT NULL,
            input jsonb,
            output jsonb,
            metadata jsonb NOT NULL,
            tool_name text,
            PRIMARY KEY (tenant_id, user_id, trace_id, ordinal)
        )""")
    op.execute("CREATE INDEX steps_by_tool ON traces.steps (tenant_id, tool_name) "
               "WHERE tool_name IS NOT NULL")

    op.execute("""
        CREATE TABLE traces.pending_feedback (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            trace_id text NOT NULL,
            score double precision NOT NULL,
            outcome text,
            seq bigint NOT NULL,
            PRIMARY KEY (tenant_id, user_id, trace_id)
        )""")

    op.execute("""
        CREATE TABLE traces.route_stats (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            model text NOT NULL,
            agent text NOT NULL,
            count bigint NOT NULL,
            successes bigint NOT NULL,
            outcomes_known bigint NOT NULL,
            feedback_sum numeric NOT NULL,
            feedback_n bigint NOT NULL,
            latency_sum numeric NOT NULL,
            tokens_sum bigint NOT NULL,
            cost_sum numeric NOT NULL,
            steps_sum bigint NOT NULL,
            tool_calls_sum bigint NOT NULL,
            PRIMARY KEY (tenant_id, user_id, model, agent)
        )""")
    op.execute("CREATE INDEX route_stats_by_route ON traces.route_stats "
               "(tenant_id, model, agent)")

    op.execute("""
        CREATE TABLE traces.tool_stats (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            tool_name text NOT NULL,
            calls bigint NOT NULL,
            traces bigint NOT NULL,
            successes bigint NOT NULL,
            duration_sum numeric NOT NULL,
            PRIMARY KEY (tenant_id, user_id, tool_name)
        )""")

    op.execute("""
        CREATE TABLE traces.class_stats (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            query_class text NOT NULL,
            model text NOT NULL,
            count bigint NOT NULL,
            successes bigint NOT NULL,
            outcomes_known bigint NOT NULL,
            feedback_sum numeric NOT NULL,
            feedback_n bigint NOT NULL,
            reward_sum numeric NOT NULL,
            reward_n bigint NOT NULL,
            PRIMARY KEY (tenant_id, user_id, query_class, model)
        )""")
    op.execute("CREATE INDEX class_stats_by_class ON traces.class_stats "
               "(tenant_id, query_class, model)")

    op.execute("""
        CREATE TABLE traces.step_stats (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            model text NOT NULL,
            agent text NOT NULL,
            step_type text NOT NULL,
            count bigint NOT NULL,
            duration_sum numeric NOT NULL,
            duration_sq_sum numeric NOT NULL,
            duration_min double precision NOT NULL,
            duration_max double precision NOT NULL,
            prompt_tokens_sum bigint NOT NULL,
            completion_tokens_sum bigint NOT NULL,
            energy_joules_sum numeric NOT NULL,
            PRIMARY KEY (tenant_id, user_id, model, agent, step_type)
        )""")


def downgrade() -> None:
    for table in ("step_stats", "class_stats", "tool_stats", "route_stats",
                  "pending_feedback", "steps", "traces", "dead_letters", "applied_events",
                  "projection_checkpoints"):
        op.execute(f"DROP TABLE IF EXISTS traces.{table}")
