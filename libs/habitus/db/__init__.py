"""Postgres: connection pools, URLs, migrations, checkpoints."""
