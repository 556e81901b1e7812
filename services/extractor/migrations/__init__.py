"""Migrations of the `extractor` schema."""
