"""The gateway's key table (schema `gateway`), shared with the CLI that manages keys."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, DateTime, MetaData, func
from sqlmodel import Field, SQLModel

metadata = MetaData(schema="gateway")


class ApiKey(SQLModel, table=True):
    __tablename__ = "api_keys"
    metadata = metadata

    key_hash: str = Field(primary_key=True, max_length=64, description="sha256 hex of the key")
    key_prefix: str = Field(max_length=16, description="first characters, to recognise a key")
    tenant_id: str = Field(index=True, max_length=64)
    is_admin: bool = Field(default=False)
    role: str = Field(default="agent", max_length=32,
                      description="tenant-admin or agent (habitus.auth.roles)")
    label: str = Field(default="", max_length=200)
    created_at: datetime = Field(
        sa_column=Column(DateTime(timezone=True), nullable=False, server_default=func.now())
    )
    revoked_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
