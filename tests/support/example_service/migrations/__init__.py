"""Migrations of the `example` schema."""
