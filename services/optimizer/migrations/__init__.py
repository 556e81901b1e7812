"""Migrations of the `optimize` schema."""
