"""Bundled scenarios: stories of users told as the items an agent would report, each with what
Habitus should have learned from it (`three_weeks` is the one `habitus demo` replays)."""
