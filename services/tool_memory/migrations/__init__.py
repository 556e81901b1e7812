"""Migrations of the `tools` schema."""
