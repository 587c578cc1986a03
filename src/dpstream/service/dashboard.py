"""The dashboard of ``dpstream serve``: one public page at ``GET /`` and its files under ``/static/``.

The page lists the streams, collectors and aggregates and, for each, charts the moving average of its
released values (drawn in the browser as SVG by ``static/dashboard.js``: no library, nothing fetched from
another host, so it works without internet access), with theta and the privacy guarantee in words; an
aggregate's chart has one line per partition, its released buckets by time.  The page is served with each
source's name and guarantee already written in (from the same public facts as ``GET /streams``,
``GET /collectors`` and ``GET /aggregates``, an aggregate's without the rows it consumed), so it says
something true before its script runs; the script then replaces those cards with live ones.  It reads
only the public endpoints (``/streams``, ``/collectors``, ``/aggregates``, their ``released`` and the
streams' and collectors' ``events``): no token, and nothing secret ever reaches the page.  A moving
average of released values is post-processing: it costs no privacy budget.

The files are package data of :mod:`dpstream.service` (``static/*``), installed with dpstream.
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

from dpstream.service.answers import describe

__all__ = ["SECURITY_HEADERS", "STATIC", "guarantee_in_words", "mount_dashboard", "render_page"]

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


#: Where the page's template takes each list of sources.
_SLOTS = {"stream": "<!--streams-->", "collector": "<!--collectors-->", "aggregate": "<!--aggregates-->"}


def _number(x: float, digits: int = 4) -> str:
    """A number as the page's script writes it (``number`` in ``static/dashboard.js``).

    >>> [_number(x) for x in (1.0, 2500.0, 0.5, 12345.6, 1e-4)], _number(1.2345e-6, 3)
    (['1', '2,500', '0.5', '12,350', '1e-4'], '1.23e-6')
    """
    if x == int(x):
        return f"{int(x):,}"
    if abs(x) < 1e-3:
        mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{float(f'{x:.{digits}g}'):,.12f}".rstrip("0").rstrip(".")


def guarantee_in_words(kind: str, facts: dict[str, Any]) -> str:
    """What the privacy budget guarantees, in words that cannot be read as budget left or exhausted.

    ``facts`` is a source's public description (``GET /streams/NAME``); the relation of neighbours is the one
    the privacy statement names (``static/dashboard.js``'s ``guaranteeInWords`` says the same).

    >>> guarantee_in_words("stream", {"budget": {"epsilon": 1.0, "delta": 0.0},
    ...                               "privacy": "1-DP; neighbours: event level: two streams differ ...; ..."})
    "each value is protected at ε = 1 (event level); the stream's guarantee is ε = 1 however long it runs"

    A zCDP stream's is stated in rho, with the (epsilon, delta) it implies (its epsilon's are not pure ones):

    >>> guarantee_in_words("stream", {"budget": {"epsilon": 1.0, "delta": 1e-6, "rho": 0.0244},
    ...                               "privacy": "...; neighbours: event level: two streams differ ...; ..."})
    "each value is protected at ρ = 0.0244 (zCDP), which implies (ε, δ) = (1, 1e-6) (event level); the stream's \
guarantee is ρ = 0.0244 however long it runs"

    An aggregate's guarantee is per unit and window, composed over the windows released: its facts say it in words.

    >>> guarantee_in_words("aggregate", {"guarantee": "each meter's readings in each UTC day: ε = 1; ..."})
    "each meter's readings in each UTC day: ε = 1; ..."
    """
    if kind == "aggregate":
        return facts["guarantee"]
    budget = facts["budget"]
    level = f"ε = {_number(budget['epsilon'])}"
    if budget["delta"] > 0:
        level += f", δ = {_number(budget['delta'], 3)}"
    relation = re.search(r"neighbours: ([^:;]+)", facts["privacy"])
    where = relation.group(1) if relation else "event level"
    if budget.get("rho") is not None:  # zCDP: rho is what it spends; its (epsilon, delta) is implied
        rho = f"ρ = {_number(budget['rho'])}"
        return (f"each value is protected at {rho} (zCDP), which implies (ε, δ) = ({_number(budget['epsilon'])}, "
                f"{_number(budget['delta'], 3)}) ({where}); the stream's guarantee is {rho} however long it runs")
    if kind == "collector":
        return (f"each client's report is protected at {level} (local, randomized by the client); "
                f"the collector's guarantee is {level} however many reports arrive")
    return f"each value is protected at {level} ({where}); the stream's guarantee is {level} however long it runs"


def _card(kind: str, facts: dict[str, Any]) -> str:
    """One source's card as served, before the script replaces it: its name, its guarantee, the exact statement."""
    name, text = escape(facts["name"]), (lambda words: escape(words, quote=False))
    released = (f'<dt>values released</dt><dd data-fact="released">{_number(facts["released"])}</dd>'
                if kind == "aggregate" else "")  # its released buckets; the rows it consumed are data
    return (f'<section class="source" data-kind="{kind}" data-name="{name}" data-server="">'
            f'<h3><span class="name">{name}</span></h3><dl class="facts">{released}<dt>guarantee</dt>'
            f'<dd data-fact="guarantee">{text(guarantee_in_words(kind, facts))}</dd></dl>'
            f'<details><summary>the exact guarantee</summary><p class="statement">{text(facts["privacy"])}</p>'
            "</details></section>")


def render_page(template: str, sources: dict[str, list[dict[str, Any]]]) -> str:
    """The page with every source's card written in (``sources``: the public facts of each kind's sources)."""
    for kind, slot in _SLOTS.items():
        cards = "".join(_card(kind, facts) for facts in sources[kind])
        empty = f"None yet: create one with POST /{kind}s (needs the token)."
        template = template.replace(slot, cards or f'<p class="empty" data-server="">{empty}</p>')
    return template


def mount_dashboard(app: FastAPI) -> None:
    """Serve the page at ``GET /`` and its files at ``/static/`` (both public)."""
    template = (STATIC / "index.html").read_text(encoding="utf-8")

    @app.get("/", include_in_schema=False)
    def dashboard(request: Request) -> HTMLResponse:
        storage = request.app.state.storage
        page = render_page(template, {kind: [describe(source, counts=kind != "aggregate")
                                             for source in storage.sources(kind)] for kind in _SLOTS})
        return HTMLResponse(page, headers=SECURITY_HEADERS)

    app.mount("/static", StaticFiles(directory=STATIC, check_dir=True), name="static")
