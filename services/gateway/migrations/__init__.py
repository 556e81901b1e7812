"""Migrations of the `gateway` schema."""
