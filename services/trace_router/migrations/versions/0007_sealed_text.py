"""A trace's text is sealed with its user's key (habitus.crypto.columns), so what Postgres keeps
of it (heap, write-ahead log, backups) is unreadable once the user's key is destroyed.

- `traces.traces.search`, the generated tsvector over query and result, goes with its GIN index:
  a tsvector of the plaintext is plaintext on disk. Its place is taken by `traces.search_terms`,
  a per-user index: one row per distinct word of a trace's query and result, the word sealed
  for its user (deterministic, so a query word sealed the same way finds it; unreadable, and
  deleted, with the user). The service fills it when it stores a trace.
- Existing traces keep their terms: the backfill copies the lexemes of their tsvector (the
  'simple' configuration: lowercased words) as plain terms, which the search also looks up.
  Those rows were written before sealing, their query and result are plaintext beside them,
  and the terms go with them on erasure as the tsvector did; a replay of `traces.store` writes
  all of it again, sealed. (A revision is literal SQL and the migrating process has no keyring,
  so the backfill cannot seal.)
- A step's input, output and metadata are sealed whole, so the figures the trace queries read
  from them in SQL are kept as columns of their own (what the projection computes for the
  aggregates: token counts, energy, whether the step succeeded), backfilled from the JSON.

The downgrade brings the tsvector back: over sealed rows it indexes ciphertext, so traces
stored sealed are found again only after a replay under the older code.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-12
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _number(column: str, field: str) -> str:
    return (f"CASE WHEN jsonb_typeof({column}) = 'object' "
            f"AND jsonb_typeof({column} -> '{field}') = 'number' "
            f"THEN ({column} ->> '{field}')::numeric END")


def _count(column: str, field: str) -> str:
    """A token count as the projection takes it: truncated, at least 0 (and within int8)."""
    return (f"coalesce(LEAST(GREATEST(trunc({_number(column, field)}), 0), "
            f"9223372036854775807)::int8, 0)")


def upgrade() -> None:
    op.execute("""
        CREATE TABLE traces.search_terms (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            term text NOT NULL,
            trace_id text NOT NULL,
            PRIMARY KEY (tenant_id, user_id, term, trace_id)
        )""")
    # the words of the traces stored before, split as the service splits them (lowercased
    # runs of letters and digits, at most 100 characters: an address or a path is several
    # words, as a search for any part of it reads it), plain: those rows are plain beside them
    op.execute("""
        INSERT INTO traces.search_terms (tenant_id, user_id, term, trace_id)
        SELECT DISTINCT t.tenant_id, t.user_id, w.m[1], t.trace_id
        FROM traces.traces t,
             regexp_matches(lower(t.query || ' ' || coalesce(t.result, '')),
                            '([[:alnum:]]+)', 'g') AS w(m)
        WHERE length(w.m[1]) <= 100""")
    op.execute("DROP INDEX IF EXISTS traces.traces_search")
    op.execute("ALTER TABLE traces.traces DROP COLUMN search")

    op.execute("""ALTER TABLE traces.steps
        ADD COLUMN prompt_tokens bigint NOT NULL DEFAULT 0,
        ADD COLUMN completion_tokens bigint NOT NULL DEFAULT 0,
        ADD COLUMN energy_joules double precision NOT NULL DEFAULT 0,
        ADD COLUMN succeeded boolean NOT NULL DEFAULT false""")
    op.execute(f"""
        UPDATE traces.steps SET
            prompt_tokens = {_count("output", "prompt_tokens")},
            completion_tokens = {_count("output", "completion_tokens")},
            energy_joules = coalesce(({_number("metadata", "energy_joules")})::float8, 0),
            succeeded = (jsonb_typeof(output) = 'object'
                         AND coalesce(output -> 'success', 'null')
                             NOT IN ('null', 'false', '0', '""', '[]', '{{}}'))
        WHERE (jsonb_typeof(output) = 'object'
               AND (output ? 'prompt_tokens' OR output ? 'completion_tokens'
                    OR output ? 'success'))
           OR metadata ? 'energy_joules'""")


def downgrade() -> None:
    op.execute("""ALTER TABLE traces.steps
        DROP COLUMN prompt_tokens, DROP COLUMN completion_tokens, DROP COLUMN energy_joules,
        DROP COLUMN succeeded""")
    op.execute("""ALTER TABLE traces.traces ADD COLUMN search tsvector GENERATED ALWAYS AS (
        to_tsvector('simple'::regconfig, query || ' ' || result)) STORED""")
    op.execute("CREATE INDEX traces_search ON traces.traces USING gin (search)")
    op.execute("DROP TABLE IF EXISTS traces.search_terms")
