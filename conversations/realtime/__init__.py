"""The websockets (docs/realtime.md): ``/ws/conversations/`` (``conversation.py``, with what it
sends and holds back in ``delivery.py``) and ``/ws/workbench/`` (``workbench.py``), both on
``base.py``; who is on a socket (``ws_auth.py``); the routes (``routing.py``).
"""
