"""The Model Context Protocol face of the API (docs/mcp.md): memory tools for agents.

- ``tools``: the registry — each tool a thin translation onto its REST twins, schemas derived
  from ``cortexdb/schemas`` (``schema``);
- ``twin``: a tool call's twin requests, run through the API's pipeline as the caller;
- ``server``: the ``mcp`` package's server, listing and calling the tools;
- ``asgi``: ``/mcp`` on the HTTP server (streamable HTTP), behind the API's door;
- ``stdio``: ``cortexdb mcp``, one configured caller over stdin/stdout.

Only ``server`` and ``stdio`` import the ``mcp`` package, so the HTTP server loads it on the
first ``/mcp`` request, not at start.
"""
