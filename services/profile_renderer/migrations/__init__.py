"""Migrations of the `profile` schema."""
