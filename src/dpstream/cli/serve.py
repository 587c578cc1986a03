"""``dpstream serve``: the release and collector service (one process; see :mod:`dpstream.service`)."""

from __future__ import annotations

import click

from dpstream.cli._app import cli, say
from dpstream.cli._options import DEFAULT_DATABASE

__all__ = ["serve"]


@cli.command()
@click.option("--database", default=DEFAULT_DATABASE, show_default=True, metavar="URL",
              help="sqlite:///FILE (created 0600, WAL mode) or postgresql://USER@HOST:PORT/DB "
                   "(needs pip install 'dpstream[postgres]').")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option("--token", envvar="DPSTREAM_TOKEN", metavar="TOKEN", show_envvar=True,
              help="Bearer token that every write must carry (at least 16 characters); prefer the environment "
                   "variable, which other users cannot read in the process list.")
@click.option("--database-key", envvar="DPSTREAM_DATABASE_KEY", metavar="KEY", show_envvar=True,
              help="32 bytes in URL-safe base64: encrypt every stream's key and state in the database with it "
                   "(AES-256-GCM); a database made with it opens only with it. Give it through the environment.")
@click.option("--max-body-bytes", default=None, type=click.IntRange(min=1024), metavar="N",
              help="Largest request body (default 8 MiB: a batch of 100,000 values with times).")
@click.option("--header-timeout", default=None, type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Seconds a client has to send a request's head (request line and headers), from the connection's "
                   "opening or the request's first byte; beyond, 408 and closed (default 10).")
@click.option("--body-timeout", default=None, type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Seconds a client has to send a request's body, plus one second for every --body-min-rate bytes "
                   "received; beyond, 408 and closed (default 10).")
@click.option("--body-min-rate", default=None, type=click.FloatRange(min=0, min_open=True), metavar="BYTES",
              help="Bytes a second a body sent at never runs out of time (default 16384).")
@click.option("--max-connections", default=None, type=click.IntRange(min=1), metavar="N",
              help="Connections served at once: while more are open, every request is answered 503 (default 1000).")
@click.option("--ssl-certfile", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Serve HTTPS with this certificate (PEM); with --ssl-keyfile.")
@click.option("--ssl-keyfile", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The certificate's private key (PEM).")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="Let web pages of this origin (scheme://host[:port]) call the API from a browser (CORS); "
                   "repeatable. A page that sends the token shows it to its users.")
@click.option("--access-log", default=None, metavar="FILE",
              help="Write one JSON line per request (method, path, status, seconds, the token's id: never a token) "
                   "to FILE, appended, or '-' for the standard error (instead of the server's plain lines).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True)
def serve(database: str, host: str, port: int, token: str | None, database_key: str | None,
          max_body_bytes: int | None, header_timeout: float | None, body_timeout: float | None,
          body_min_rate: float | None, max_connections: int | None,
          ssl_certfile: str | None, ssl_keyfile: str | None, cors_origins: tuple[str, ...], access_log: str | None,
          log_level: str) -> None:
    """Serve differentially private streams and ToPL collectors over HTTP until stopped.

    Writes need Authorization: Bearer TOKEN: the bootstrap token (an admin's) or a scoped one of
    "dpstream token create" or POST /tokens; reads (released values, events, the page) are public.
    The database holds SECRET keys and states: keep it readable by the service only.
    """
    from dpstream.service import StorageError, create_app
    from dpstream.service.access_log import open_access_log
    from dpstream.service.app import MAX_BODY_BYTES
    from dpstream.service.secrets import parse_database_key
    from dpstream.service.server import ClientLimits, build_server, listen

    if not token:
        raise click.UsageError("a token is needed: --token TOKEN or the environment variable DPSTREAM_TOKEN.")
    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise click.UsageError("--ssl-certfile and --ssl-keyfile go together.")
    try:
        log = None if access_log is None else open_access_log(access_log)
    except OSError as error:
        raise click.ClickException(f"--access-log {access_log}: {(error.strerror or str(error)).lower()}.") from None
    given = {"header_timeout": header_timeout, "body_timeout": body_timeout, "body_min_rate": body_min_rate,
             "max_connections": max_connections}
    try:
        limits = ClientLimits(**{name: value for name, value in given.items() if value is not None})  # NaN passes click
        key = None if database_key is None else parse_database_key(database_key)
        app = create_app(database=database, token=token, database_key=key,
                         max_body_bytes=max_body_bytes or MAX_BODY_BYTES, cors_origins=cors_origins, access_log=log)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    except StorageError as error:
        raise click.ClickException(str(error)) from None
    try:  # bound here, so that a port in use is one line, not a server that starts and stops
        listener = listen(host, port)
    except OSError as error:
        reason = (error.strerror or str(error)).lower()
        raise click.ClickException(f"cannot listen on {host}:{port}: {reason}.") from None
    scheme = "https" if ssl_certfile else "http"
    say(f"dpstream serve: {app.state.storage.describe()} on {scheme}://{host}:{listener.getsockname()[1]}")
    build_server(app, limits, log_level=log_level, ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
                 access_log=log is None).run(sockets=[listener])
