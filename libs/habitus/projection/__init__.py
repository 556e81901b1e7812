"""Projections and the runner that feeds them."""

from habitus.projection.base import ApplyContext, Delivered, Projection
from habitus.projection.runner import ProjectionRunner, RunnerConfig

__all__ = ("ApplyContext", "Delivered", "Projection", "ProjectionRunner", "RunnerConfig")
