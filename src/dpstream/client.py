"""Python clients of ``dpstream serve``: :class:`Client` for streams and collectors, :class:`ToPLClient` for reports.

:class:`ToPLClient` fetches a collector's public parameters, randomizes values locally with the
library's ToPL randomizer (:class:`dpstream.release.ToPLRandomizer`) and posts only the reports, in the
wire format of :mod:`dpstream.release.topl_wire`: raw values never leave the process.

Every error answer of the service raises :class:`ServiceError` with its status and message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import numpy as np

from dpstream.noise.bits import BitsSeed, make_bits
from dpstream.release.topl_randomizer import ToPLRandomizer

__all__ = ["Client", "ServiceError", "ToPLClient"]


class ServiceError(Exception):
    """An error answer of the service: ``status`` (e.g. 409) and its ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


class Client:
    """The service at ``url``; ``token`` is needed for writes only; ``http`` an HTTP client to use instead
    of a new one (e.g. FastAPI's ``TestClient``).

    Against a running ``dpstream serve``::

        client = Client("http://127.0.0.1:8000", token)
        client.create_stream("load", epsilon=1.0, upper_bound=100.0)
        client.send("load", [3.5, 7.0], first_position=0)
    """

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0,
                 http: httpx.Client | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if http is None:
            http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout)
        http.headers.update(headers)
        self._http = http

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        answer = self._http.request(method, path, **kwargs)
        if answer.status_code >= 400:
            try:
                message = answer.json()["message"]
            except (ValueError, KeyError, TypeError):
                message = answer.text[:200]
            raise ServiceError(answer.status_code, message)
        return answer

    # -- service ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``GET /health``."""
        return self._call("GET", "/health").json()

    # -- streams ---------------------------------------------------------------------------

    def create_stream(self, name: str, *, epsilon: float, upper_bound: float, method: str = "tops",
                      **params: Any) -> dict[str, Any]:
        """``POST /streams``: a central-DP stream (``params``: the library's parameter names; ``seed`` for tests)."""
        body = {"name": name, "method": method, "epsilon": epsilon, "upper_bound": upper_bound, **params}
        return self._call("POST", "/streams", json=body).json()

    def streams(self) -> list[dict[str, Any]]:
        """``GET /streams``: the public facts of every stream."""
        return self._call("GET", "/streams").json()["streams"]

    def stream(self, name: str) -> dict[str, Any]:
        """``GET /streams/{name}``."""
        return self._call("GET", f"/streams/{name}").json()

    def send(self, name: str, values: Sequence[float] | np.ndarray, *, times: Sequence[float] | None = None,
             first_position: int | None = None) -> list[dict[str, Any]]:
        """``POST /streams/{name}/values``: the values released by this batch.

        Give ``first_position`` (the stream position of ``values[0]``) to make a retry safe: a
        batch that was ingested already is answered with the same released values.
        """
        body: dict[str, Any] = {"values": np.asarray(values, dtype=np.float64).tolist()}
        if times is not None:
            body["times"] = np.asarray(times, dtype=np.float64).tolist()
        if first_position is not None:
            body["first_position"] = int(first_position)
        return self._call("POST", f"/streams/{name}/values", content=_dumps(body),
                          headers={"Content-Type": "application/json"}).json()["released"]

    def released(self, name: str, *, after: int | None = None, limit: int | None = None,
                 kind: str = "streams") -> list[dict[str, Any]]:
        """``GET /streams/{name}/released``: one page of released values after position ``after``."""
        params = {key: value for key, value in (("after", after), ("limit", limit)) if value is not None}
        return self._call("GET", f"/{kind}/{name}/released", params=params).json()["released"]

    def all_released(self, name: str, *, after: int | None = None, kind: str = "streams") -> Iterator[dict[str, Any]]:
        """Every released value after ``after``, page by page, to the current end."""
        while True:
            page = self.released(name, after=after, kind=kind, limit=10_000)
            if not page:
                return
            yield from page
            after = page[-1]["position"]

    def events(self, name: str, *, after: int | None = None, kind: str = "streams") -> Iterator[dict[str, Any]]:
        """``GET /streams/{name}/events``: released values as they come (server-sent events); never ends by itself."""
        params = {} if after is None else {"after": after}
        with self._http.stream("GET", f"/{kind}/{name}/events", params=params, timeout=None) as answer:
            if answer.status_code >= 400:
                answer.read()
                raise ServiceError(answer.status_code, answer.json().get("message", ""))
            for line in answer.iter_lines():
                if line.startswith("data: "):
                    yield json.loads(line[6:])

    # -- collectors ------------------------------------------------------------------------

    def create_collector(self, name: str, *, epsilon: float, upper_bound: float, **params: Any) -> dict[str, Any]:
        """``POST /collectors``: a ToPL collector (``threshold_epsilon``, ``hold``, ``max_range``, ``buckets``, ...)."""
        body = {"name": name, "epsilon": epsilon, "upper_bound": upper_bound, **params}
        return self._call("POST", "/collectors", json=body).json()

    def collector(self, name: str) -> dict[str, Any]:
        """``GET /collectors/{name}``: public facts (theta once published, reports received, hold)."""
        return self._call("GET", f"/collectors/{name}").json()

    def collector_parameters(self, name: str) -> str:
        """``GET /collectors/{name}/parameters``: the parameters document of the wire format."""
        return self._call("GET", f"/collectors/{name}/parameters").text

    def send_reports(self, name: str, reports: str, *, first_position: int | None = None) -> list[dict[str, Any]]:
        """``POST /collectors/{name}/reports`` with a reports document of the wire format."""
        params = {} if first_position is None else {"first_position": first_position}
        return self._call("POST", f"/collectors/{name}/reports", content=reports, params=params,
                          headers={"Content-Type": "application/json"}).json()["released"]

    # -- aggregates ------------------------------------------------------------------------

    def create_aggregate(self, name: str, *, epsilon: float, bucket: str, unit_window: str, unit_bound: float,
                         **params: Any) -> dict[str, Any]:
        """``POST /aggregates``: population aggregates of privacy units' rows (``dpstream aggregate``'s options by
        name: ``upper_bound``, ``clip``, ``statistic``, ``partitions``, ``unit_max_rows``, ...)."""
        body = {"name": name, "epsilon": epsilon, "bucket": bucket, "unit_window": unit_window,
                "unit_bound": unit_bound, **params}
        return self._call("POST", "/aggregates", json=body).json()

    def aggregate(self, name: str) -> dict[str, Any]:
        """``GET /aggregates/{name}``: public facts and what a unit gets, in words."""
        return self._call("GET", f"/aggregates/{name}").json()

    def send_rows(self, name: str, times: Sequence[str | float], units: Sequence[str], values: Sequence[float],
                  partitions: Sequence[str] | None = None, *, first_position: int | None = None,
                  flush: bool = False) -> list[dict[str, Any]]:
        """``POST /aggregates/{name}/rows``: the buckets this batch of rows closed (``bucket``, ``partition``,
        ``value``); ``flush`` closes the open bucket after them.  ``first_position`` makes a retry safe."""
        body: dict[str, Any] = {"times": list(times), "units": [str(unit) for unit in units],
                                "values": np.asarray(values, dtype=np.float64).tolist(), "flush": flush}
        if partitions is not None:
            body["partitions"] = [str(name) for name in partitions]
        if first_position is not None:
            body["first_position"] = int(first_position)
        return self._call("POST", f"/aggregates/{name}/rows", content=_dumps(body),
                          headers={"Content-Type": "application/json"}).json()["released"]


class ToPLClient:
    """Clients of one ToPL collector: fetch the public parameters, randomize locally, post the reports.

    Parameters
    ----------
    url, token
        The service and its token (posting reports is a write).
    http : httpx.Client, optional
        The HTTP client to use (e.g. FastAPI's ``TestClient``); default a new one for ``url``.
    collector : str
        The collector's name.
    clip : bool
        Clip values outside [0, B] into it before randomizing (the client's own policy).
    bits : None, int or bit source
        The randomness of the reports: None (default) the OS CSPRNG; an int for tests only.

    Until theta is published, the collector takes only its ``hold`` threshold reports, so
    :meth:`send` sends at most the number still missing, fetches the parameters again, and goes on.
    A batch refused as stale (409, the parameters changed between the fetch and the post) raises
    :class:`ServiceError`; it is never randomized again automatically, since a second report of
    the same values would spend their budget twice.
    """

    def __init__(self, url: str, collector: str, token: str | None = None, *, clip: bool = False,
                 bits: BitsSeed = None, http: httpx.Client | None = None) -> None:
        self.client = Client(url, token, http=http)
        self.collector = collector
        self.clip = clip
        self._bits = None if bits is None else make_bits(bits)  # one source for every batch

    def parameters(self) -> ToPLRandomizer:
        """The collector's current public parameters, checked by the library's ToPL client."""
        return ToPLRandomizer.from_json(self.client.collector_parameters(self.collector), clip=self.clip)

    def send(self, values: Sequence[float] | np.ndarray) -> list[dict[str, Any]]:
        """Randomize ``values`` locally and post the reports; returns the estimates the collector released."""
        values = np.asarray(values, dtype=np.float64)
        released: list[dict[str, Any]] = []
        start = 0
        while start < values.size:
            local = self.parameters()
            stop = values.size
            if local.threshold is None:
                facts = self.client.collector(self.collector)
                stop = min(stop, start + max(facts["hold"] - facts["position"], 0))
                if stop == start:
                    continue  # theta is being published: fetch the parameters again
            batch = local.report_batch(values[start:stop], bits=self._bits)
            released += self.client.send_reports(self.collector, batch.to_json())
            start = stop
        return released

    def close(self) -> None:
        self.client.close()


def _dumps(document: dict[str, Any]) -> bytes:
    return json.dumps(document, allow_nan=False, separators=(",", ":")).encode()
