"""Hosting a service: broker, RPC, projection runners, health and metrics, graceful stop."""

from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring

__all__ = ("ServiceContext", "ServiceDescriptor", "Wiring")
