"""Migrations of the `learning` schema."""
