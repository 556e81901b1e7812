"""The shared LLM client: settings, one bounded JSON call, per-tenant daily budgets."""

from habitus.llm.budget import (
    Budget,
    MemoryUsage,
    PostgresUsage,
    UsageStore,
    usage_table_sql,
)
from habitus.llm.client import Completion, LlmClient, Sampling, TextCompletion
from habitus.llm.errors import BudgetExhausted, LlmError
from habitus.llm.settings import LlmSettings

__all__ = [
    "Budget",
    "BudgetExhausted",
    "Completion",
    "LlmClient",
    "LlmError",
    "LlmSettings",
    "MemoryUsage",
    "PostgresUsage",
    "Sampling",
    "TextCompletion",
    "UsageStore",
    "usage_table_sql",
]
