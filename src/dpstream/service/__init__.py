"""``dpstream serve``: a long-running release and collector service over HTTP, with its state in a database.

* :mod:`~dpstream.service.app` -- the HTTP API (:func:`create_app`), assembled from
  :mod:`~dpstream.service.routers` (one router per resource: health, streams, collectors),
  :mod:`~dpstream.service.dependencies` (the state, the bearer token and the request body),
  :mod:`~dpstream.service.parsing` (the limits and the one JSON parser of request bodies),
  :mod:`~dpstream.service.ingest` (a batch through its mechanism into the database, in one transaction),
  :mod:`~dpstream.service.answers` and :mod:`~dpstream.service.errors` (what the API answers),
  :mod:`~dpstream.service.dashboard` (the page);
* :mod:`~dpstream.service.storage` -- SQLite or PostgreSQL, one interface, a versioned schema;
* :mod:`~dpstream.service.mechanisms` -- which mechanisms a stream may use, their keys and states;
* :mod:`~dpstream.service.secrets` -- sealing the secret columns under a database key (optional).

The Python client is :mod:`dpstream.client`.
"""

from dpstream.service.app import create_app
from dpstream.service.storage import SCHEMA_VERSION, SchemaError, StorageError, open_storage

__all__ = ["SCHEMA_VERSION", "SchemaError", "StorageError", "create_app", "open_storage"]
