"""Launches: the processes a user starts from the workbench (docs/subsystems/launches.md). The
rows are ``tools.models.Launch``."""
