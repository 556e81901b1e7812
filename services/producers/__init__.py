"""The producers: deterministic rules that turn ingest events into learning candidates."""
