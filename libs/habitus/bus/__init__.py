"""The bus: streams, publishing with deduplication, RPC."""

from habitus.bus.connect import connect
from habitus.bus.publisher import EventPublisher, PublishResult
from habitus.bus.rpc import RpcClient, RpcContext, RpcError, RpcRegistry
from habitus.bus.streams import DLQ, EVENTS, INGEST, ensure_streams, stream_configs

__all__ = (
    "DLQ",
    "EVENTS",
    "INGEST",
    "EventPublisher",
    "PublishResult",
    "RpcClient",
    "RpcContext",
    "RpcError",
    "RpcRegistry",
    "connect",
    "ensure_streams",
    "stream_configs",
)
