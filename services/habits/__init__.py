"""The habits service: reviewed "When / Do" habits, from evidence to approved guidance."""
