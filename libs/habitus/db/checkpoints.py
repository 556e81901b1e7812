"""DDL and names of the projection checkpoint and tracking tables, for migrations.

Only the schema objects are spelled from here; every statement that reads or writes them is a
method of `habitus.projection.checkpoints.CheckpointStore`, which also documents them. This
module re-exports what migrations and older callers import.
"""

from __future__ import annotations

from habitus.projection.checkpoints import (
    AppliedKey,
    DeadLetterRecord,
    applied_table,
    checkpoint_ddl,
    checkpoint_table,
    dead_letter_table,
    tracking_ddl,
)

__all__ = ("AppliedKey", "DeadLetterRecord", "applied_table", "checkpoint_ddl",
           "checkpoint_table", "dead_letter_table", "tracking_ddl")
