"""The stability-detector: turns candidate evidence into the per-user facet cache."""
