from django.apps import AppConfig


class ToolsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "tools"

    def ready(self) -> None:
        # Imported here, not at the top: the runtime imports the core's services, which need
        # every app's models loaded.
        from .runtime import handlers

        handlers.register()
