"""The dashboard of ``dpstream serve``: one public page at ``GET /`` and its files under ``/static/``.

The page lists the streams and collectors and, for each, charts the moving average of its released
values (drawn in the browser as SVG by ``static/dashboard.js``: no library, nothing fetched from
another host, so it works without internet access), with theta, the budget spent and the privacy
guarantee in words.  It reads only the public endpoints (``/streams``, ``/collectors``, their
``released`` and ``events``): no token, and nothing secret ever reaches the page.  A moving average
of released values is post-processing: it costs no privacy budget.

The files are package data of :mod:`dpstream.service` (``static/*``), installed with dpstream.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from starlette.staticfiles import StaticFiles

__all__ = ["SECURITY_HEADERS", "STATIC", "mount_dashboard"]

#: The dashboard's files (package data).
STATIC = Path(__file__).with_name("static")

#: Headers of the page: only this server's own scripts, styles and connections; never framed.
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def mount_dashboard(app: FastAPI) -> None:
    """Serve the page at ``GET /`` and its files at ``/static/`` (both public)."""

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)

    app.mount("/static", StaticFiles(directory=STATIC, check_dir=True), name="static")
