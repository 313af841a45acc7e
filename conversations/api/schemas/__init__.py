"""Input and output schemas of the REST API (camelCase on the wire): the shared types
(``common.py``), events (``events.py``), tool cards (``cards.py``), conversations, messages,
turns and calls (``conversations.py``), the snapshot and history (``snapshot.py``), async runs
(``runs.py``)."""
