from habitus.db.alembic_env import run_migrations

run_migrations("profile")
