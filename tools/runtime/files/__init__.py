"""The path tools: ``read``, ``grep``, ``find`` and ``ls``, confined by ``tools/runtime/paths.py``.

Each handler does its blocking I/O in one short-lived thread (``blocking.py``), streams what it
reads and holds at most one answer's worth of results.
"""
