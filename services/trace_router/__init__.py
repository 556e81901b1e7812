"""The trace-router service: traces and feedback in, routing policies that learn from them out."""
