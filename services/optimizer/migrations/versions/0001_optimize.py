"""The optimizer's schema: the evaluation log (trace outcomes, feedback, routing decisions), the
runs and their trials, the tenants' configurations and default policies, the LLM usage of the
proposer and the replay, and the projections' bookkeeping (partitioned checkpoints, members,
applied ids, dead letters).

Every row is keyed by the user of its event, the tenant's own (runs, configurations) being
under `_tenant`: users' events are folded in separate partitions, so rows of two users never
share a key whose winner would depend on which partition went first.

Revision ID: 0001
Revises:
Create Date: 2026-12-06
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS optimize")
    op.execute("""CREATE TABLE IF NOT EXISTS optimize.projection_checkpoints (
            projection text NOT NULL,
            parts smallint NOT NULL DEFAULT 1,
            part smallint NOT NULL DEFAULT 0,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now(),
            state text NOT NULL DEFAULT 'active',
            cutover_seq bigint,
            owner text,
            PRIMARY KEY (projection, parts, part)
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS optimize.projection_members (
            member text PRIMARY KEY,
            host text NOT NULL DEFAULT '',
            pid integer NOT NULL DEFAULT 0,
            joined_at timestamptz NOT NULL DEFAULT now(),
            lease_until timestamptz NOT NULL
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS optimize.applied_events (
            projection text NOT NULL,
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            event_id text NOT NULL,
            seq bigint NOT NULL,
            PRIMARY KEY (projection, tenant_id, user_id, event_id)
        )""")
    op.execute("""CREATE TABLE IF NOT EXISTS optimize.dead_letters (
            tenant_id text NOT NULL DEFAULT '',
            projection text NOT NULL,
            seq bigint NOT NULL,
            event_id text,
            reason text NOT NULL,
            detail text NOT NULL,
            dead_at timestamptz NOT NULL DEFAULT now(),
            user_id text,
            PRIMARY KEY (tenant_id, projection, seq)
        )""")
    op.execute("CREATE INDEX IF NOT EXISTS dead_letters_by_seq "
               "ON optimize.dead_letters (projection, seq)")
    op.execute("""CREATE TABLE IF NOT EXISTS optimize.llm_usage (
            tenant_id text NOT NULL,
            day date NOT NULL,
            calls bigint NOT NULL DEFAULT 0,
            tokens_in bigint NOT NULL DEFAULT 0,
            tokens_out bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, day)
        )""")
    op.execute("""
        CREATE TABLE optimize.outcomes (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            trace_id text NOT NULL,
            decision_id text,
            seq bigint NOT NULL,
            query text NOT NULL,
            query_class text NOT NULL,
            has_code boolean NOT NULL,
            has_math boolean NOT NULL,
            has_reasoning boolean NOT NULL,
            query_length integer NOT NULL,
            model text NOT NULL,
            outcome text,
            feedback double precision,
            latency_seconds double precision NOT NULL,
            cost_usd double precision,
            tokens bigint NOT NULL,
            prompt_tokens bigint,
            completion_tokens bigint,
            energy_joules double precision,
            started_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, trace_id)
        )""")
    op.execute("CREATE INDEX outcomes_by_time ON optimize.outcomes (tenant_id, started_at)")
    op.execute("""
        CREATE TABLE optimize.feedback (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            trace_id text NOT NULL,
            score double precision NOT NULL,
            outcome text,
            seq bigint NOT NULL,
            PRIMARY KEY (tenant_id, user_id, trace_id)
        )""")
    op.execute("""
        CREATE TABLE optimize.decisions (
            tenant_id text NOT NULL,
            decision_id text NOT NULL,
            user_id text NOT NULL,
            model text NOT NULL,
            policy text NOT NULL,
            query_class text,
            propensity double precision,
            offered text[] NOT NULL,
            urgency double precision,
            default_model text,
            fallback_model text,
            configuration integer,
            decided_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, decision_id, user_id)
        )""")
    op.execute("""
        CREATE TABLE optimize.runs (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            run_id text NOT NULL,
            definition jsonb NOT NULL,
            status text NOT NULL,
            trials integer NOT NULL DEFAULT 0,
            best_trial_id text,
            frontier jsonb NOT NULL DEFAULT '[]',
            stopped_early boolean NOT NULL DEFAULT false,
            reason text,
            started_at double precision NOT NULL,
            ended_at double precision,
            PRIMARY KEY (tenant_id, user_id, run_id)
        )""")
    op.execute("CREATE INDEX runs_running ON optimize.runs (status, started_at) "
               "WHERE status = 'running'")
    op.execute("""
        CREATE TABLE optimize.trials (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            run_id text NOT NULL,
            idx integer NOT NULL,
            trial_id text NOT NULL,
            params jsonb NOT NULL,
            proposer text NOT NULL,
            reasoning text,
            parse_failure boolean NOT NULL,
            metrics jsonb NOT NULL,
            intervals jsonb NOT NULL,
            support integer NOT NULL,
            refused text,
            evaluated_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, run_id, idx)
        )""")
    op.execute("""
        CREATE TABLE optimize.configurations (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            version integer NOT NULL,
            params jsonb NOT NULL,
            previous jsonb NOT NULL,
            run_id text,
            trial_id text,
            undoes integer,
            applied_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, version)
        )""")
    op.execute("""
        CREATE TABLE optimize.defaults (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            policy text NOT NULL,
            version integer NOT NULL,
            PRIMARY KEY (tenant_id, user_id)
        )""")


def downgrade() -> None:
    for table in ("defaults", "configurations", "trials", "runs", "decisions", "feedback",
                  "outcomes", "llm_usage", "dead_letters", "applied_events",
                  "projection_members", "projection_checkpoints"):
        op.execute(f"DROP TABLE IF EXISTS optimize.{table}")
