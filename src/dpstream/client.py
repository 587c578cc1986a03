"""Python clients of ``dpstream serve``: :class:`Client` for streams and collectors, :class:`ToPLClient` for reports.

:class:`ToPLClient` fetches a collector's public parameters, randomizes values locally with the
library's ToPL randomizer (:class:`dpstream.release.ToPLRandomizer`) and posts only the reports, in the
wire format of :mod:`dpstream.release.topl_wire`: raw values never leave the process.

Every failure raises :class:`ServiceError`: an error answer with its status and message, a network failure
(no answer) with ``status`` None and its cause.  Both clients retry what can be retried safely
(:class:`Retry`: connection errors, timeouts, 5xx, with exponential backoff, a bounded number of times and
seconds): a read, and a batch of values, rows or reports, which always names its ``first_position``, so
that the service recognizes a batch whose answer was lost and answers it from what it released the first
time, never ingesting it twice.  Creating a stream, collector or aggregate is retried only when no
connection was made (the request never left).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from dpstream.noise.bits import BitsSeed, make_bits
from dpstream.release.topl_randomizer import ToPLRandomizer

__all__ = ["Client", "Retry", "ServiceError", "ToPLClient"]


class ServiceError(Exception):
    """An error answer of the service: ``status`` (e.g. 409) and its ``message``; or no answer at all (the service
    unreachable, the connection lost, a timeout) after the retries: ``status`` None and the network cause."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message if status is None else f"{status}: {message}")
        self.status, self.message = status, message


@dataclass(frozen=True)
class Retry:
    """How a request is tried again after a connection error, a timeout or a 5xx answer: at most ``attempts``
    tries in all, within ``total_seconds`` from the first; before try k+1 a random pause of up to
    ``first_delay * 2**(k-1)`` seconds, at most ``max_delay`` (exponential backoff with full jitter, so that
    clients that failed together do not come back together).  ``Retry(attempts=1)`` never retries."""

    attempts: int = 6
    first_delay: float = 0.2
    max_delay: float = 5.0
    total_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.first_delay < 0 or self.max_delay < 0 or self.total_seconds < 0:
            raise ValueError(f"a retry needs attempts >= 1 and delays and total_seconds >= 0, got {self}.")

    def pause(self, tried: int) -> float:
        """The pause before the next try, after ``tried`` tries."""
        return random.uniform(0.0, min(self.max_delay, self.first_delay * 2.0 ** (tried - 1)))


#: Network failures after which the request certainly never reached the service.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)
#: How many times a batch follows its source when other clients moved it on (see :meth:`Client._ingest`).
_MOVES = 64
#: How the service's 409 ends when another process held the source too long (the batch is tried again as it is).
_BUSY = "Retry the batch."


def _retry_after(answer: httpx.Response) -> float | None:
    """The seconds a 429 answer asks to wait (its ``Retry-After`` in seconds); None for any other answer."""
    if answer.status_code != 429:
        return None
    try:
        seconds = float(answer.headers.get("retry-after", ""))
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None


class Client:
    """The service at ``url``; ``token`` is needed for writes only; ``http`` an HTTP client to use instead
    of a new one (e.g. FastAPI's ``TestClient``).

    Against a running ``dpstream serve``::

        client = Client("http://127.0.0.1:8000", token)
        client.create_stream("load", epsilon=1.0, upper_bound=100.0)
        client.send("load", [3.5, 7.0], first_position=0)
    """

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0,
                 http: httpx.Client | None = None, retry: Retry = Retry()) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if http is None:
            http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout)
        http.headers.update(headers)
        self._http = http
        self.retry = retry
        #: The next position of each source this client sent to without a first_position: ``(kind, name)`` -> int.
        self._positions: dict[tuple[str, str], int] = {}

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, *, idempotent: bool | None = None, **kwargs: Any) -> httpx.Response:
        """One request, tried again as :attr:`retry` says when it failed on the way or with a 5xx; ``idempotent``
        (default: a GET) tells whether a request that may have reached the service can be sent again.  A 429
        (a contributor's rate: refused before anything was done) is sent again after its ``Retry-After`` when that
        fits in the tries and ``total_seconds`` left; otherwise it is the caller's ``ServiceError``."""
        idempotent = method == "GET" if idempotent is None else idempotent
        start, tried = time.monotonic(), 0
        while True:
            tried += 1
            wait = None
            try:
                answer = self._http.request(method, path, **kwargs)
                wait = _retry_after(answer)
                if wait is None and (answer.status_code < 500 or not idempotent):
                    break
                failure: Exception | httpx.Response = answer
            except httpx.TransportError as error:
                if not idempotent and not isinstance(error, _NOT_SENT):
                    raise ServiceError(None, f"{method} {path}: no answer ({_cause(error)}); not sent again, since "
                                             "it may have been done (look before trying again).") from None
                failure = error
            pause = self.retry.pause(tried) if wait is None else wait
            if tried >= self.retry.attempts or time.monotonic() - start + pause > self.retry.total_seconds:
                if isinstance(failure, httpx.Response):
                    answer = failure
                    break
                raise ServiceError(None, f"{method} {path}: no answer after {tried} tries in "
                                         f"{time.monotonic() - start:.1f} s ({_cause(failure)}).") from None
            time.sleep(pause)
        if answer.status_code >= 400:
            raise ServiceError(answer.status_code, _message(answer))
        return answer

    def _ingest(self, kind: str, name: str, count: int, first_position: int | None,
                post: Callable[[int], httpx.Response]) -> httpx.Response:
        """Post a batch of ``count`` inputs at a first position, by ``post(position)`` (retried by :meth:`_call`).

        With ``first_position`` the batch goes there, and a 409 (a gap, another batch there) is the caller's.
        Without, it goes where this client's last batch to the source ended (the source's position on first use);
        when other clients moved the source on, the 409 says the batch is not at that position (a batch there
        sent again is answered, not refused), so it is sent, unchanged, at the source's new position."""
        follow = first_position is None
        if follow:
            first_position = self._positions.get((kind, name))
            if first_position is None:
                first_position = self._call("GET", f"/{kind}s/{name}").json()["position"]
        for _ in range(_MOVES):
            try:
                answer = post(first_position)
                break
            except ServiceError as error:
                if follow:  # sent again, it is answered if it landed there; another batch follows it if not
                    self._positions[(kind, name)] = first_position
                if error.status != 409 or not follow:
                    raise
                if error.message.endswith(_BUSY):  # another process held the source: the batch may have landed
                    time.sleep(self.retry.pause(1))  # before this try's answer was lost, so try the same place
                    continue
                now = self._call("GET", f"/{kind}s/{name}").json()["position"]
                if now <= first_position:  # not moved on by others: stale parameters, or a conflict
                    raise
                first_position = now
        else:
            raise ServiceError(409, f"{kind} {name!r} moved on {_MOVES} times while this batch was sent.")
        self._positions[(kind, name)] = first_position + count
        return answer

    # -- service ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``GET /health``."""
        return self._call("GET", "/health").json()

    def archive(self, kind: str, name: str) -> dict[str, Any]:
        """``DELETE /{kind}s/{name}`` (``kind``: ``"stream"``, ``"collector"`` or ``"aggregate"``): archive the source.

        It takes no more batches (they are refused, 410), its key and state are erased, its released values and
        ledger stay readable and its name stays taken.  Archiving it again answers the same (sent again when the
        answer is lost).  The facts answered say ``"archived": true`` and when (``"archived_at"``)."""
        if kind not in ("stream", "collector", "aggregate"):
            raise ValueError(f"kind must be 'stream', 'collector' or 'aggregate', got {kind!r}.")
        self._positions.pop((kind, name), None)
        return self._call("DELETE", f"/{kind}s/{name}", idempotent=True).json()

    # -- streams ---------------------------------------------------------------------------

    def create_stream(self, name: str, *, epsilon: float, upper_bound: float, method: str = "tops",
                      **params: Any) -> dict[str, Any]:
        """``POST /streams``: a central-DP stream (``params``: the library's parameter names; ``seed`` for tests; a
        zCDP ``method``, ``bt-zcdp``, ``sqrt-zcdp``, ``tops-zcdp`` or ``banded-zcdp``, needs ``delta``: its
        (epsilon, delta) target)."""
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

        ``first_position`` is the stream position of ``values[0]``; without it, where this client's last
        batch to the stream ended (the stream's position on first use), following the stream when other
        clients moved it on.  The batch always names it, so a retry after a lost answer is answered with
        the values released the first time, never ingested twice.
        """
        body: dict[str, Any] = {"values": np.asarray(values, dtype=np.float64).tolist()}
        if times is not None:
            body["times"] = np.asarray(times, dtype=np.float64).tolist()

        def post(position: int) -> httpx.Response:
            return self._call("POST", f"/streams/{name}/values", idempotent=True,
                              content=_dumps({**body, "first_position": position}),
                              headers={"Content-Type": "application/json"})

        return self._ingest("stream", name, len(body["values"]), first_position, post).json()["released"]

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
        try:
            with self._http.stream("GET", f"/{kind}/{name}/events", params=params, timeout=None) as answer:
                if answer.status_code >= 400:
                    answer.read()
                    raise ServiceError(answer.status_code, _message(answer))
                for line in answer.iter_lines():
                    if line.startswith("data: "):
                        yield json.loads(line[6:])
        except httpx.TransportError as error:
            raise ServiceError(None, f"GET /{kind}/{name}/events: {_cause(error)}.") from None

    # -- collectors ------------------------------------------------------------------------

    def create_collector(self, name: str, *, epsilon: float, upper_bound: float, **params: Any) -> dict[str, Any]:
        """``POST /collectors``: a ToPL collector (``threshold_epsilon``, ``hold``, ``max_range``, ``buckets``, ...)."""
        body = {"name": name, "epsilon": epsilon, "upper_bound": upper_bound, **params}
        return self._call("POST", "/collectors", json=body).json()

    def collector(self, name: str) -> dict[str, Any]:
        """``GET /collectors/{name}``: public facts (theta once published, reports received, hold)."""
        return self._call("GET", f"/collectors/{name}").json()

    def collector_parameters(self, name: str, *, version: int = 2) -> str:
        """``GET /collectors/{name}/parameters``: the parameters document of the wire format, in ``version`` 2 (the
        masses as strings) or 1; :meth:`ToPLRandomizer.from_json <dpstream.release.ToPLRandomizer.from_json>`
        reads both (and a service older than version 2 answers version 1)."""
        return self._call("GET", f"/collectors/{name}/parameters", params={"version": version}).text

    def send_reports(self, name: str, reports: str, *, first_position: int | None = None) -> list[dict[str, Any]]:
        """``POST /collectors/{name}/reports`` with a reports document of the wire format; ``first_position`` as
        :meth:`send`'s (resent, the same document is answered from what it released the first time)."""

        def post(position: int) -> httpx.Response:
            return self._call("POST", f"/collectors/{name}/reports", idempotent=True, content=reports,
                              params={"first_position": position}, headers={"Content-Type": "application/json"})

        count = len(json.loads(reports).get("report", ())) if isinstance(reports, str) else None
        if count is None:
            raise TypeError("reports must be the JSON text of a reports document (ReportBatch.to_json()).")
        return self._ingest("collector", name, count, first_position, post).json()["released"]

    # -- aggregates ------------------------------------------------------------------------

    def create_aggregate(self, name: str, *, epsilon: float, bucket: str, unit_window: str, unit_bound: float,
                         **params: Any) -> dict[str, Any]:
        """``POST /aggregates``: population aggregates of privacy units' rows (``dpstream aggregate``'s options by
        name: ``upper_bound``, ``clip``, ``statistic``, ``partitions``, ``unit_max_rows``, ``noise="gaussian"`` with
        ``delta``, ...)."""
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
        ``value``); ``flush`` closes the open bucket after them.  ``first_position`` (the aggregate's row
        position of the first row) as :meth:`send`'s."""
        body: dict[str, Any] = {"times": list(times), "units": [str(unit) for unit in units],
                                "values": np.asarray(values, dtype=np.float64).tolist(), "flush": flush}
        if partitions is not None:
            body["partitions"] = [str(name) for name in partitions]

        def post(position: int) -> httpx.Response:
            return self._call("POST", f"/aggregates/{name}/rows", idempotent=True,
                              content=_dumps({**body, "first_position": position}),
                              headers={"Content-Type": "application/json"})

        return self._ingest("aggregate", name, len(body["values"]), first_position, post).json()["released"]

    # -- tokens (an admin's token) ---------------------------------------------------------------

    def create_token(self, role: str, **scope: Any) -> dict[str, Any]:
        """``POST /tokens``: issue a token of ``role`` (``"admin"``, ``"producer"``, ``"contributor"``, ``"reader"``)
        with its scope: ``streams``, ``aggregates`` (lists of names, a producer's), ``collector``, ``rate``,
        ``window`` (e.g. ``"1h"``), ``max_batch`` (a contributor's), ``note``.  The answer's ``"token"`` is the
        token, shown this once; ``"id"`` names it in :meth:`tokens`, :meth:`revoke_token` and the access log."""
        return self._call("POST", "/tokens", json={"role": role, **scope}).json()

    def tokens(self) -> list[dict[str, Any]]:
        """``GET /tokens``: every token issued, revoked ones too, with its public facts (never the token)."""
        return self._call("GET", "/tokens").json()["tokens"]

    def revoke_token(self, token_id: str) -> dict[str, Any]:
        """``DELETE /tokens/{token_id}``: revoke the token, at once in every process (sent again when the answer
        is lost: revoking it again answers the same)."""
        return self._call("DELETE", f"/tokens/{token_id}", idempotent=True).json()

    # -- budgets -----------------------------------------------------------------------------------

    def create_budget(self, name: str, *, rho: float | None = None, epsilon: float | None = None,
                      delta: float | None = None) -> dict[str, Any]:
        """``POST /budgets`` (an admin's token): a budget of total ``rho`` (zCDP; its (epsilon, delta) stated at
        ``delta``, default 1e-6) or ``epsilon`` (pure DP), which sources created with ``budget=name`` are charged."""
        body = {"name": name, **{key: value for key, value in (("rho", rho), ("epsilon", epsilon), ("delta", delta))
                                 if value is not None}}
        return self._call("POST", "/budgets", json=body).json()

    def budgets(self) -> list[str]:
        """``GET /budgets``: the names of the budgets."""
        return self._call("GET", "/budgets").json()["budgets"]

    def budget(self, name: str) -> dict[str, Any]:
        """``GET /budgets/{name}``: its total, subject, each source's charge, spent and left (``{"rho", "epsilon",
        "delta"}`` for zCDP, ``{"epsilon"}`` for pure DP)."""
        return self._call("GET", f"/budgets/{name}").json()


class ToPLClient:
    """Clients of one ToPL collector: fetch the public parameters, randomize locally, post the reports.

    Parameters
    ----------
    url, token
        The service and a token that may post reports to the collector: a contributor's of it (see
        :meth:`Client.create_token`), or an admin's.
    http : httpx.Client, optional
        The HTTP client to use (e.g. FastAPI's ``TestClient``); default a new one for ``url``.
    collector : str
        The collector's name.
    clip : bool
        Clip values outside [0, B] into it before randomizing (the client's own policy).
    bits : None, int or bit source
        The randomness of the reports: None (default) the OS CSPRNG; an int for tests only.
    retry : Retry
        How a batch is tried again after a network failure or a 5xx (see :class:`Client`).

    Until theta is published, the collector takes only its ``hold`` threshold reports, so
    :meth:`send` sends at most the number still missing, fetches the parameters again, and goes on.

    The reports of a batch are randomized once: a batch whose answer did not come (a network
    failure past the retries, a refusal) is kept, and a later :meth:`send` of the same values sends
    that same document again, never new reports of them -- a second report of the same values would
    spend their budget twice.  So a batch refused as stale (409, the parameters changed between the
    fetch and the post) is sent as it is again and refused again, until :meth:`discard` gives its
    values up.
    """

    def __init__(self, url: str, collector: str, token: str | None = None, *, clip: bool = False,
                 bits: BitsSeed = None, http: httpx.Client | None = None, retry: Retry = Retry()) -> None:
        self.client = Client(url, token, http=http, retry=retry)
        self.collector = collector
        self.clip = clip
        self._bits = None if bits is None else make_bits(bits)  # one source for every batch
        #: The documents sent without an answer, by the digest of their values and their number.
        self._unanswered: dict[tuple[str, int], str] = {}

    def parameters(self) -> ToPLRandomizer:
        """The collector's current public parameters, checked by the library's ToPL client."""
        return ToPLRandomizer.from_json(self.client.collector_parameters(self.collector), clip=self.clip)

    def send(self, values: Sequence[float] | np.ndarray, *, first_position: int | None = None
             ) -> list[dict[str, Any]]:
        """Randomize ``values`` locally and post the reports; returns the estimates the collector released.

        ``first_position`` is the collector position of the first report; without it, where this client's
        last batch ended (the collector's position on first use), following the collector when other
        clients moved it on, with the same reports.  A batch resent after a lost answer is recognized
        by the collector and answered from what it released the first time."""
        values = np.asarray(values, dtype=np.float64)
        released: list[dict[str, Any]] = []
        start = 0
        while start < values.size:
            count, document = self._unanswered_batch(values[start:])
            if document is None:
                local = self.parameters()
                count = values.size - start
                if local.threshold is None:
                    facts = self.client.collector(self.collector)
                    count = min(count, max(facts["hold"] - facts["position"], 0))
                    if count == 0:
                        continue  # theta is being published: fetch the parameters again
                document = local.report_batch(values[start:start + count], bits=self._bits).to_json()
                self._unanswered[(_digest(values[start:start + count]), count)] = document
            at = None if first_position is None else first_position + start
            released += self.client.send_reports(self.collector, document, first_position=at)
            del self._unanswered[(_digest(values[start:start + count]), count)]
            start += count
        return released

    def discard(self) -> int:
        """Give up the batches sent without an answer (their values may have been reported once): the next
        :meth:`send` of those values randomizes them anew.  Returns how many batches were given up."""
        count = len(self._unanswered)
        self._unanswered.clear()
        return count

    def _unanswered_batch(self, values: np.ndarray) -> tuple[int, str | None]:
        """The number and document of an unanswered batch that ``values`` start with, or ``(0, None)``."""
        for (digest, count), document in self._unanswered.items():
            if count <= values.size and _digest(values[:count]) == digest:
                return count, document
        return 0, None

    def close(self) -> None:
        self.client.close()


def _digest(values: np.ndarray) -> str:
    """A batch's values recognized again (in this process only: never sent)."""
    return hashlib.sha256(np.ascontiguousarray(values, dtype=np.float64).tobytes()).hexdigest()


def _message(answer: httpx.Response) -> str:
    """The message of an error answer: its JSON ``message``, else the start of its text."""
    try:
        answer.read()
        return answer.json()["message"]
    except (ValueError, KeyError, TypeError):
        return answer.text[:200]


def _cause(error: Exception) -> str:
    """A network failure in one line: its type and first line."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _dumps(document: dict[str, Any]) -> bytes:
    return json.dumps(document, allow_nan=False, separators=(",", ":")).encode()
