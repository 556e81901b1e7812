"""Database URL spellings: one setting, three drivers' dialects."""

from __future__ import annotations


def conninfo(url: str) -> str:
    """A libpq URL for psycopg (`postgresql://...`), whatever dialect the setting used."""
    for prefix in ("postgresql+psycopg://", "postgresql+psycopg2://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def sqlalchemy_url(url: str) -> str:
    return "postgresql+psycopg://" + conninfo(url)[len("postgresql://") :]
