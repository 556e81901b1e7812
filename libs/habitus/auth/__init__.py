"""API keys: created once, stored hashed, each bound to one tenant (or admin)."""
