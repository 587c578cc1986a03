"""``dpstream serve``: a long-running release and collector service over HTTP, with its state in a database.

* :mod:`~dpstream.service.app` -- the HTTP API (:func:`create_app`);
* :mod:`~dpstream.service.storage` -- SQLite or PostgreSQL, one interface, a versioned schema;
* :mod:`~dpstream.service.mechanisms` -- which mechanisms a stream may use, their keys and states;
* :mod:`~dpstream.service.secrets` -- sealing the secret columns under a database key (optional).

The Python client is :mod:`dpstream.client`.
"""

from dpstream.service.app import create_app
from dpstream.service.storage import SCHEMA_VERSION, SchemaError, StorageError, open_storage

__all__ = ["SCHEMA_VERSION", "SchemaError", "StorageError", "create_app", "open_storage"]
