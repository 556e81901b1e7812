"""Hosting a service: broker, RPC, projection runners, health and metrics, graceful stop."""

from habitus.service.context import ServiceContext
from habitus.service.spec import ServiceSpec

__all__ = ("ServiceContext", "ServiceSpec")
