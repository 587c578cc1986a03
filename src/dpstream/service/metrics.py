"""``GET /metrics``: the service's counters in the Prometheus text format (public, as every read).

Counted by this process since it started (each process of several on one database counts its own;
Prometheus sums them over the processes it scrapes):

* ``dpstream_batches_total{kind}`` -- batches ingested (a retry answered from the ledger is not one);
* ``dpstream_values_total{kind}`` -- values of streams and reports of collectors ingested; the rows
  of aggregates are not counted, since under unit-level privacy their number is data;
* ``dpstream_responses_total{status}`` -- answers by HTTP status (the refusals are the 4xx and 5xx);
* ``dpstream_request_seconds{method,route}`` -- a histogram of the time to each answer's start, by
  the route's template (``/streams/{name}/values``), never by a name, a query or a token.

Read from the database at each scrape, the same for every process:

* ``dpstream_epsilon{kind,name,delta}``, ``dpstream_epsilon_spent{kind,name,delta}`` -- each source's
  guarantee and the budget spent of it, as ``GET /streams/{name}`` publishes them (``budget``), labelled
  with the delta the epsilon is stated at (``"0"``: pure DP), so an (epsilon, delta) never reads as pure;
* ``dpstream_rho{kind,name}``, ``dpstream_rho_spent{kind,name}`` -- a zCDP source's rho and the rho spent
  (zCDP sources compose by adding rho's; the epsilon they imply does not add up);
* ``dpstream_position{kind,name}`` -- the values a stream, the reports a collector consumed (an
  aggregate's rows are left out, as above).

Nothing else: no secret, no released value, no number the API does not already publish.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dpstream.service.answers import describe
from dpstream.service.storage import Storage

__all__ = ["CONTENT_TYPE", "COUNTED_KINDS", "Metrics", "MetricsMiddleware", "mount_metrics"]

#: The media type of ``GET /metrics``.
CONTENT_TYPE = CONTENT_TYPE_LATEST
#: The kinds of source whose number of inputs is public (at event level): an aggregate's rows are data.
COUNTED_KINDS = ("stream", "collector")
#: The gauges read from the database at each scrape, with their labels.
_SOURCE_GAUGES = (("dpstream_epsilon", ["kind", "name", "delta"]),
                  ("dpstream_epsilon_spent", ["kind", "name", "delta"]),
                  ("dpstream_rho", ["kind", "name"]), ("dpstream_rho_spent", ["kind", "name"]),
                  ("dpstream_position", ["kind", "name"]))
#: The latency histogram's buckets, seconds.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """The counters of one application (its own registry: several applications in one process count apart)."""

    def __init__(self, storage: Storage) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.batches = Counter("dpstream_batches", "Batches ingested by this process (a retry answered from the "
                               "ledger is not one).", ["kind"], registry=self.registry)
        self.values = Counter("dpstream_values", "Values (streams) and reports (collectors) ingested by this "
                              "process; an aggregate's rows are not counted (under unit-level privacy their number "
                              "is data).", ["kind"], registry=self.registry)
        self.responses = Counter("dpstream_responses", "Answers of this process by HTTP status.", ["status"],
                                 registry=self.registry)
        self.latency = Histogram("dpstream_request_seconds", "Seconds from a request to the start of its answer, "
                                 "by the route's template.", ["method", "route"], buckets=_BUCKETS,
                                 registry=self.registry)
        self.registry.register(_Sources(storage))

    def ingested(self, kind: str, count: int) -> None:
        """One batch of ``count`` inputs committed to a source of ``kind``."""
        self.batches.labels(kind).inc()
        if kind in COUNTED_KINDS:
            self.values.labels(kind).inc(count)

    def text(self) -> bytes:
        """The Prometheus text of every metric."""
        return generate_latest(self.registry)


class _Sources:
    """The public facts of the sources, read from the database at each scrape."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def describe(self) -> list[Metric]:  # the names, without reading the database at registration
        return [GaugeMetricFamily(name, "", labels=labels) for name, labels in _SOURCE_GAUGES]

    def collect(self) -> Iterator[Metric]:
        epsilon = GaugeMetricFamily("dpstream_epsilon", "The epsilon of each source's guarantee, stated at the delta "
                                    "of its label (0: pure DP).", labels=["kind", "name", "delta"])
        spent = GaugeMetricFamily("dpstream_epsilon_spent", "The epsilon each source spent of its guarantee "
                                  "(its published budget), stated at the delta of its label (0: pure DP).",
                                  labels=["kind", "name", "delta"])
        rho = GaugeMetricFamily("dpstream_rho", "The rho of each zCDP source's guarantee (rho's add; the epsilon "
                                "they imply does not).", labels=["kind", "name"])
        rho_spent = GaugeMetricFamily("dpstream_rho_spent", "The rho each zCDP source spent (its published budget).",
                                      labels=["kind", "name"])
        position = GaugeMetricFamily("dpstream_position", "The values a stream, the reports a collector consumed "
                                     "(an aggregate's rows are data: left out).", labels=["kind", "name"])
        for kind in ("stream", "collector", "aggregate"):
            for source in self.storage.sources(kind):
                budget: dict[str, Any] = describe(source)["budget"]
                delta = "0" if budget["delta"] == 0 else repr(budget["delta"])  # the shortest exact text
                epsilon.add_metric([kind, source.name, delta], budget["epsilon"])
                spent.add_metric([kind, source.name, delta], budget["epsilon_spent"])
                if "rho" in budget:
                    rho.add_metric([kind, source.name], budget["rho"])
                    rho_spent.add_metric([kind, source.name], budget["rho_spent"])
                if kind in COUNTED_KINDS:
                    position.add_metric([kind, source.name], source.position)
        yield from (epsilon, spent, rho, rho_spent, position)


class MetricsMiddleware:
    """Counts every answer by status and times it by route (pure ASGI: a streamed answer is timed to its start)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began, started = time.perf_counter(), False

        def count(status: int) -> None:
            template = getattr(scope.get("route"), "path", None) or "other"  # a template, never the request's path
            self.metrics.latency.labels(scope["method"], template).observe(time.perf_counter() - began)
            self.metrics.responses.labels(str(status)).inc()

        async def counted(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                count(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counted)
        except Exception:
            if not started:  # the outermost handler answers it with a 500
                count(500)
            raise


def mount_metrics(app: FastAPI, metrics: Metrics) -> None:
    """Serve ``GET /metrics`` and count every request of ``app``."""

    @app.get("/metrics", include_in_schema=False)
    def get_metrics() -> Response:
        return Response(metrics.text(), media_type=CONTENT_TYPE)

    app.add_middleware(MetricsMiddleware, metrics=metrics)
