"""Toolcore as an MCP client (docs/mcp.md): the servers' rows and their tools (``services.py``),
their place in the catalog (``specs.py``), secrets sealed at rest (``secrets.py``), connections
(``connection.py``), the sessions a worker process keeps (``sessions.py``), the handler the
workers run (``handlers.py``, results mapped by ``results.py``), the admin (``admin.py``)."""
