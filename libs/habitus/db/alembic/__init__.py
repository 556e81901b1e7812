"""The one Alembic environment every service's migrations run in.

Alembic's `script_location` points here (`env.py`, `script.py.mako`); each service keeps only its
revision files, given to Alembic as `version_locations` (see `habitus.db.migrate`). Nothing
imports this package: Alembic loads `env.py` from the directory.
"""
