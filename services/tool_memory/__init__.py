"""The tool-memory service: tool-scoped rules, captured from turns and pinned into prompts."""
