"""Habitus services: one package each; a service imports `habitus`, never another service."""
