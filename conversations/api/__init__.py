"""HTTP access to the durable core: the ninja API (``base.py``) and its routers by resource
(``conversations.py``, ``calls.py``, ``assets.py``), their schemas (``schemas/``), and what
guards every request: authentication (``auth.py``), the throttle of failed credentials
(``throttle.py``), the middleware of errors, hosts and health, and outages answered 503.

Empty on purpose: importing a module of this package (the sockets read ``schemas/``) does not
build the API.
"""
