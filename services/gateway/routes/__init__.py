"""The gateway's routes, one module per concern; `services.gateway.app` registers them."""
