"""Migrations of the `traces` schema."""
