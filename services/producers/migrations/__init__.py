"""Migrations of the `producers` schema."""
