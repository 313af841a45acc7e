"""Async runs: ``bash`` commands that go on after their call settled, their notices and the
model's handles on them (docs/subsystems/async_runs.md). The rows are ``tools.models.AsyncRun``."""
