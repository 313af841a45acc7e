"""The execution runtime, the execution side in one place: what runs ``ready`` calls (the
workers, the handlers, capture, watching) and one package a feature with all its parts
(``async_runs``, ``launches``, ``left_processes``, ``host``: services, endpoints, admin, ...;
docs/architecture.md, "The runtime's features"). It uses the durable core's services; the core
never imports it. What the core must call is registered from ``ToolsConfig.ready()``
(``conversations/services/runners.py``, ``participants.py``)."""
