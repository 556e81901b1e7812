"""Postgres: connection pools, URLs, migrations, checkpoints.

Importing the package makes psycopg read `json`/`jsonb` values with pydantic-core's parser
(`pydantic_core.from_json`) instead of the standard library's, for every connection of the
process: the learning cache reads each user's value summaries and facets as JSONB at every
rebuild, and the standard parser was its largest single cost after the round trips (about
three times slower on a summary). The two give equal values for any JSON Postgres returns
(tests/unit/test_db_json.py holds them to each other).
"""

from __future__ import annotations

import pydantic_core
from psycopg.types.json import set_json_loads

set_json_loads(pydantic_core.from_json)
