"""Cross-origin requests (CORS): which web pages, served from other origins, may call the API.

Off unless origins are given (``dpstream serve --cors-origin ORIGIN``): then Starlette's
``CORSMiddleware`` answers the browsers' preflight ``OPTIONS`` and adds the ``Access-Control-*``
headers for exactly those origins -- never ``*`` -- with the methods and the request headers the API
uses (``Authorization``, ``Content-Type``).  A page allowed here that sends the bearer token shows
it to everyone who uses the page.

>>> check_origins(["https://app.example.org", "http://127.0.0.1:8080"])
['https://app.example.org', 'http://127.0.0.1:8080']
>>> check_origins(["https://app.example.org/"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: --cors-origin 'https://app.example.org/' is not an origin: scheme://host[:port] ...
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

__all__ = ["CORS_HEADERS", "CORS_METHODS", "check_origins", "install_cors"]

#: The methods a page of another origin may use.
CORS_METHODS = ["GET", "POST", "PUT", "DELETE"]

#: The request headers a page of another origin may send.
CORS_HEADERS = ["Authorization", "Content-Type"]

#: An origin as browsers send it: http or https, a host name, an IPv4 or a bracketed IPv6 address, a port.
_ORIGIN = re.compile(r"https?://(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


def check_origins(origins: Iterable[str]) -> list[str]:
    """The origins, each checked to be ``scheme://host[:port]`` (``ValueError`` naming the first that is not)."""
    checked = []
    for origin in origins:
        port = origin.rpartition(":")[2] if isinstance(origin, str) else ""
        if (not isinstance(origin, str) or _ORIGIN.fullmatch(origin) is None
                or (origin.count(":") > 1 and port.isdigit() and int(port) > 65535)):
            raise ValueError(f"--cors-origin {origin!r} is not an origin: scheme://host[:port] "
                             "(e.g. https://app.example.org), nothing after the port.")
        checked.append(origin)
    return checked


def install_cors(app: FastAPI, origins: list[str]) -> None:
    """Answer cross-origin requests from exactly ``origins`` (none: nothing is installed, no CORS header)."""
    if origins:
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=CORS_METHODS,
                           allow_headers=CORS_HEADERS, allow_credentials=False, max_age=600)
