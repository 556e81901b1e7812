from habitus.auth.models import metadata
from habitus.db.alembic_env import run_migrations

run_migrations("gateway", metadata)
