from django.apps import AppConfig


class ToolsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "tools"

    def ready(self) -> None:
        # Imported here, not at the top: the runtime imports the core's services, which need
        # every app's models loaded. What the core calls of the runtime is registered here, in
        # every process (conversations/services/runners.py, participants.py); recovery sweeps
        # the participants in this order: async runs, then launches, then the hosts gone. The
        # MCP servers' tools join the catalog through its provider hook (tools/catalog.py).
        from .runtime import handlers, presence
        from .runtime.async_runs import services as async_runs
        from .runtime.launches import services as launches
        from .runtime.left_processes import services as left_processes
        from .runtime.mcp import services as mcp

        handlers.register()
        left_processes.register()
        async_runs.register()
        launches.register()
        presence.register()
        mcp.register()
