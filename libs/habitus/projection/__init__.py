"""Projections and the runner that feeds them."""

from habitus.projection.base import ApplyContext, Delivered, Projection
from habitus.projection.runner import BatchOutcome, ProjectionRunner, RunnerConfig

__all__ = ("ApplyContext", "BatchOutcome", "Delivered", "Projection", "ProjectionRunner",
           "RunnerConfig")
