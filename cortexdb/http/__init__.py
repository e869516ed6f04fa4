"""A generic ASGI HTTP/1.1 + WebSocket server on Trio (httptools parses, wsproto frames).

It imports nothing from ``cortexdb``: the application that serves with it says how the answers
the server gives itself read (``error_body``) and where their request ids come from
(``new_request_id``).  ``server.py`` has the design notes and the limits.
"""

from .server import MAX_HEAD, MAX_WS_MESSAGE, Server, serve
from .wire import ErrorBody, Refusal, error_response, linger, plain_error_body, too_many_connections

__all__ = ["MAX_HEAD", "MAX_WS_MESSAGE", "ErrorBody", "Refusal", "Server", "error_response", "linger",
           "plain_error_body", "serve", "too_many_connections"]  # fmt: skip
