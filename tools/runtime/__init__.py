"""The execution runtime: what runs ``ready`` calls (handlers; workers, capture, async runs and
launches join it). It uses the durable core's services; the core never imports it. What the
core must call is registered from ``ToolsConfig.ready()``."""
