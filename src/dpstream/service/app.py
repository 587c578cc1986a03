"""The HTTP API of ``dpstream serve``: :func:`create_app` builds the FastAPI application.

Writes need ``Authorization: Bearer TOKEN`` with a token of the scope each needs
(:mod:`~dpstream.service.tokens`: the bootstrap token ``token`` is an admin; ``/tokens`` issues admin, producer,
contributor and reader tokens); reads (parameters, released values, events, the page, health) are public.
Every error is JSON ``{"status": N, "message": "..."}`` with a 4xx status that names the problem and the value, and
changes nothing: a batch is checked by the mechanism before anything is committed, and the
mechanism kept in memory is dropped and reloaded from the database after any failed batch.

A batch of values (or reports) and everything it changes -- its released values, its ledger row,
the mechanism's new secret state -- are committed in one transaction before the answer is sent
(:mod:`~dpstream.service.ingest`).  A retry of a batch whose answer was lost names the same
``first_position``: it is recognized by the ledger (same length, same content) and answered with
the values released the first time, never ingested twice.

The application is assembled from its parts: one router per resource (:mod:`~dpstream.service.routers`),
the page (:mod:`~dpstream.service.dashboard`), the API's page ``/docs`` (Swagger UI, served with its files
from the package ``fastapi-offline``: it works without internet access), the errors
(:mod:`~dpstream.service.errors`); the storage, the mechanisms in memory and the settings live on
``app.state``, where the routes reach them through :mod:`~dpstream.service.dependencies`.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from dpstream.service.access_log import AccessLog, AccessLogMiddleware
from dpstream.service.cors import check_origins, install_cors
from dpstream.service.dashboard import mount_dashboard
from dpstream.service.dependencies import Settings
from dpstream.service.errors import install_error_handlers
from dpstream.service.ingest import LiveSources
from dpstream.service.metrics import Metrics, mount_metrics
from dpstream.service.parsing import MAX_BATCH, MAX_BODY_BYTES, MAX_LIMIT
from dpstream.service.routers import aggregates, budgets, collectors, health, streams, tokens
from dpstream.service.storage import Storage, open_storage
from dpstream.service.tokens import TokenStore

__all__ = ["DOCS_STATIC", "MAX_BATCH", "MAX_BODY_BYTES", "MAX_LIMIT", "POLL_SECONDS", "create_app"]

#: Where the files of the API's page (``/docs``, Swagger UI) are served from: this server, never a CDN.
DOCS_STATIC = "/docs-static"

#: Seconds between two looks for new released values of an events stream.
POLL_SECONDS = 0.25


def create_app(*, database: str | Storage, token: str, database_key: bytes | None = None,
               max_body_bytes: int = MAX_BODY_BYTES, poll_seconds: float = POLL_SECONDS,
               cors_origins: tuple[str, ...] | list[str] = (), access_log: AccessLog | None = None) -> FastAPI:
    """The service's ASGI application.

    Parameters
    ----------
    database : str or Storage
        A database URL (``sqlite:///FILE`` or ``postgresql://...``) or an open storage.
    token : str
        The bootstrap bearer token (at least 16 characters): an admin's, which may do every write and issue the
        scoped tokens of ``/tokens``.
    database_key : bytes, optional
        32 bytes: seal every stream's key and state in the database with it (AES-256-GCM); a
        database made with a key opens only with it.  Only with a database URL.
    max_body_bytes : int
        Largest request body accepted (413 beyond).
    poll_seconds : float
        How often an events stream looks for new released values.
    cors_origins : sequence of str
        Origins (``scheme://host[:port]``) whose web pages may call the API (CORS); none by default.
    access_log : AccessLog, optional
        Where to write one JSON line per request (:mod:`~dpstream.service.access_log`); none by default.
    """
    if not isinstance(token, str) or len(token) < 16:
        raise ValueError("token must be a string of at least 16 characters (e.g. python -c 'import secrets; "
                         "print(secrets.token_urlsafe())').")
    origins = check_origins(cors_origins)
    storage = open_storage(database, database_key=database_key) if isinstance(database, str) else database
    # /docs: Swagger UI from the files fastapi-offline installs (under /docs-static), nothing from another host
    app = FastAPIOffline(title="dpstream", summary="Differentially private release of data streams", docs_url="/docs",
                         redoc_url=None, static_url=DOCS_STATIC, swagger_ui_parameters={"validatorUrl": None})
    app.state.storage = storage
    app.state.metrics = Metrics(storage)
    app.state.sources = LiveSources(storage, on_commit=app.state.metrics.ingested)
    app.state.tokens = TokenStore(storage)
    app.state.settings = Settings(token=token.encode(), max_body_bytes=max_body_bytes, poll_seconds=poll_seconds)
    install_error_handlers(app)
    install_cors(app, origins)
    mount_metrics(app, app.state.metrics)
    app.include_router(health.router)
    mount_dashboard(app)
    app.include_router(streams.router)
    app.include_router(collectors.router)
    app.include_router(aggregates.router)
    app.include_router(tokens.router)
    app.include_router(budgets.router)
    if access_log is not None:  # the outermost layer: it times and logs every answer, refusals too
        app.add_middleware(AccessLogMiddleware, log=access_log)
    return app
