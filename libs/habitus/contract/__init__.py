"""The RPC contract: every method Habitus answers, its parameters and its result.

It lives in the shared package, like the event catalog, because three parties read the same table:
the service that implements a method, the gateway that forwards it without importing that service,
and the OpenAPI document an integrator (or a fuzzer) works from.
"""

from habitus.contract.rpc import METHODS, MethodSpec, conformance_problems, method_names

__all__ = ("METHODS", "MethodSpec", "conformance_problems", "method_names")
