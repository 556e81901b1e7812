"""Migrations of the `habits` schema."""
