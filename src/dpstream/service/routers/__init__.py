"""The routes of the HTTP API, one router per resource.

* :mod:`~dpstream.service.routers.health` -- ``GET /health``;
* :mod:`~dpstream.service.routers.streams` -- ``/streams``: central DP streams and their values;
* :mod:`~dpstream.service.routers.collectors` -- ``/collectors``: ToPL collectors and their reports;
* :mod:`~dpstream.service.routers.aggregates` -- ``/aggregates``: population aggregates under unit-level
  privacy and their rows;
* :mod:`~dpstream.service.routers.tokens` -- ``/tokens``: the scoped tokens, issued and revoked by an admin;
* :mod:`~dpstream.service.routers.common` -- what both share: creating a source, its released values, its
  ledger and its events.

The page and its files are :mod:`dpstream.service.dashboard`.
"""
