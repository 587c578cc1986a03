"""Every stream or collector the service creates can run: extreme parameters are refused at creation (422).

A seeded loop gives every numeric parameter of every served method and of collectors extreme values
(huge, tiny, negative, 2^63, 1e300, numbers beyond float64, strings, lists), alone and in pairs,
creates through the HTTP API (TestClient on SQLite), then feeds enough values to end the hold-out and a
few more.  No answer is ever 500, and a stream or collector answered 201 accepts its values (200).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from dpstream.release import ToPLRandomizer
from dpstream.service import create_app

TOKEN = "fuzz-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

#: Values every parameter is given: edges of each check, float64's and int64's ends, and what is not a number.
EXTREMES = (0, -1, 1, 2, 3, 7, 0.5, 0.999999, 1e-300, 5e-324, 1e-12, 1e-6, 1e6, 1e12, 1e15, 1e155, 1e200, 1e300,
            1.7e308, -1e300, 2**22, 2**31, 2**53 + 1, 2**62, 2**63, 2**64, 10**30, 10**400, True, "x", None, [1],
            float("nan"), float("inf"))

#: A small valid base for each kind, its numeric parameters, and variants that reach other code paths.
BASE = {"epsilon": 1.0, "upper_bound": 100.0, "hold": 16, "max_range": 64}
METHODS = {
    "tops": (["epsilon", "upper_bound", "hold", "max_range", "fanout", "window", "alpha", "threshold_epsilon",
              "smoothed_levels", "c", "threshold_step", "query_length", "period", "profile_bins", "granularity"],
             [{}, {"threshold_method": "nm-e"}, {"period": 8}, {"period": 8, "profile_bins": 4}, {"query_length": 8},
              {"smoother": "exponential"}, {"smoother": "moving_average"}]),
    "bt": (["epsilon", "upper_bound", "max_range", "granularity"], [{}]),
    "pak": (["epsilon", "upper_bound", "hold", "max_range", "threshold_fraction", "delta", "percentile", "beta",
             "multiplier", "granularity"], [{}, {"capped": False}]),
    "collector": (["epsilon", "upper_bound", "threshold_epsilon", "hold", "max_range", "buckets", "stream_grid"],
                  [{}, {"variant": "SW"}]),
}
#: Values fed after the hold-out ends.
MORE = 40
#: Hold-outs longer than this are created but not fed (the service takes up to 2^22; feeding it takes seconds).
FED_HOLD = 10_000
#: Seeded pairs of parameters at extreme values, per kind.
PAIRS = 40


def _cases() -> Iterator[tuple[str, dict]]:
    """(kind, parameters): each parameter alone with each extreme value (cycling through the variants), then
    seeded pairs of two parameters at extreme values."""
    for kind, (names, variants) in METHODS.items():
        base = {k: v for k, v in BASE.items() if kind != "bt" or k != "hold"}
        count = 0
        for name in names:
            for value in EXTREMES:
                yield kind, {**base, **variants[count % len(variants)], name: value}
                count += 1
    rng = np.random.default_rng(22)
    numeric = [v for v in EXTREMES if isinstance(v, (int, float)) and not isinstance(v, bool)]
    for kind, (names, variants) in METHODS.items():
        base = {k: v for k, v in BASE.items() if kind != "bt" or k != "hold"}
        for _ in range(PAIRS):
            first, second = rng.choice(len(names), 2, replace=False)
            params = {**base, **variants[int(rng.integers(len(variants)))]}
            params[names[first]] = numeric[int(rng.integers(len(numeric)))]
            params[names[second]] = numeric[int(rng.integers(len(numeric)))]
            yield kind, params


def _post(http: TestClient, url: str, document: object = None, content: str | None = None, case: object = None):
    body = json.dumps(document) if content is None else content  # NaN and infinities go out as JSON does not allow
    answer = http.post(url, content=body, headers=AUTH)
    assert answer.status_code != 500, (url, case or document, answer.text)
    return answer


def _hold(kind: str, params: dict) -> int:
    """The hold-out of a created stream or collector (None is the default, 65,536)."""
    return 0 if kind == "bt" else 65536 if params.get("hold") is None else params["hold"]


def _feed_stream(http: TestClient, name: str, params: dict, rng: np.random.Generator) -> None:
    hold = _hold(params["method"], params)
    values = rng.uniform(0.0, float(params["upper_bound"]), hold + MORE)
    for batch in (values[:hold], values[hold:hold + 1], values[hold + 1:]):
        if batch.size:
            answer = _post(http, f"/streams/{name}/values", {"values": batch.tolist()}, case=params)
            assert answer.status_code == 200, (params, answer.text)


def _feed_collector(http: TestClient, name: str, params: dict, rng: np.random.Generator) -> None:
    hold = _hold("collector", params)
    values = rng.uniform(0.0, float(params["upper_bound"]), hold + MORE)
    for batch in (values[:hold], values[hold:]):
        client = ToPLRandomizer.from_json(http.get(f"/collectors/{name}/parameters").text)
        reports = client.report_batch(batch, bits=int(rng.integers(1 << 30))).to_json()
        answer = _post(http, f"/collectors/{name}/reports", content=reports, case=params)
        assert answer.status_code == 200, (params, answer.text)


@pytest.fixture
def http(tmp_path):
    app = create_app(database=f"sqlite:///{tmp_path}/fuzz.db", token=TOKEN)
    yield TestClient(app, raise_server_exceptions=False)
    app.state.storage.close()


# the private profile of a period divides by its hold-out's noisy mean (at least 1e-300) and its square, which
# overflow when that mean is about 0 (a short hold-out); numpy warns there and the profile comes out flat, as it should
@pytest.mark.filterwarnings("ignore::RuntimeWarning:dpstream.thresholds.profile")
def test_extreme_parameters_are_refused_at_creation_or_run(http):
    rng = np.random.default_rng(0)
    created = refused = 0
    for number, (kind, params) in enumerate(_cases()):
        name = f"s{number}"
        if kind == "collector":
            answer = _post(http, "/collectors", {"name": name, **params})
        else:
            params = {"method": kind, **params}
            answer = _post(http, "/streams", {"name": name, **params, "seed": 1})
        bad_json = any(isinstance(v, float) and not np.isfinite(v) for v in params.values())
        assert answer.status_code in ((400,) if bad_json else (201, 422)), (params, answer.text)
        if answer.status_code != 201:
            refused += 1
            message = answer.json()["message"]
            assert "\n" not in message and len(message) < 600, message
            continue
        created += 1
        if _hold(kind, params) > FED_HOLD:
            continue
        (_feed_collector if kind == "collector" else _feed_stream)(http, name, params, rng)
    assert created > 200 and refused > 200  # the loop reaches both sides of the checks
