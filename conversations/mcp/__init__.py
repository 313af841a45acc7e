"""Toolcore as an MCP server (docs/mcp.md): the catalog's tools over Streamable HTTP at ``/mcp/``.

A way in beside the pages and the websockets. The official SDK (``mcp``) speaks the protocol in
stateless mode, a fresh transport per request; this package holds what the SDK would otherwise
keep in one process's memory: ``transport.py`` authenticates, keeps the sessions in the database
and answers what the client sends back (elicitation answers, cancels) from database state, so any
daphne serves any request of a session. ``tools.py`` publishes the catalog, ``calls.py`` runs a
``tools/call`` through the core's services and waits for its settlement, ``results.py`` shapes the
answer, ``stream.py`` adds Toolcore's own messages to a response stream, ``server.py`` runs the
SDK once per process.
"""
