"""What operators expect of ``dpstream serve``: the API's page ``/docs`` served whole by the service itself, and
Prometheus metrics at ``/metrics``."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from dpstream.service import create_app

TOKEN = "operator-test-token-0123456789"


@pytest.fixture
def http(tmp_path):
    application = create_app(database=f"sqlite:///{tmp_path}/operator.db", token=TOKEN)
    yield TestClient(application)
    application.state.storage.close()


def test_the_api_page_needs_nothing_from_another_host(http):
    page = http.get("/docs")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    assets = re.findall(r'(?:src|href)="([^"]*)"', page.text) + re.findall(r"url: '([^']*)'", page.text)
    assert len(assets) >= 4 and "/openapi.json" in assets
    assert not re.search(r"https?://", page.text)  # no other host, not even a validator
    for asset in assets:
        assert asset.startswith("/") and not asset.startswith("//"), asset
        answer = http.get(asset)
        assert answer.status_code == 200 and len(answer.content) > 100, asset
    assert "swagger-ui-bundle.js" in " ".join(assets) and '"validatorUrl": null' in page.text


def _scrape(http) -> dict[tuple[str, frozenset], float]:
    """The samples of ``GET /metrics``, parsed by prometheus-client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    answer = http.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(answer.text) for sample in family.samples}


def _value(samples, metric, **labels) -> float:
    return samples.get((metric, frozenset(labels.items())), 0.0)


def test_metrics_count_batches_values_refusals_latency_and_budget(http):
    before = _scrape(http)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert http.post("/streams", json={"name": "load", "epsilon": 1.0, "upper_bound": 100.0, "hold": 20,
                                       "seed": 1}, headers=auth).status_code == 201
    for first in (0, 30):
        batch = {"values": [5.0] * 30, "first_position": first}
        assert http.post("/streams/load/values", json=batch, headers=auth).status_code == 200
    assert http.post("/streams/load/values", json=batch, headers=auth).status_code == 200  # a retry: no new batch
    assert http.post("/streams/load/values", json={"values": [1.0]}, headers={}).status_code == 401
    assert http.post("/streams/load/values", json={"values": [1.0], "first_position": 99},
                     headers=auth).status_code == 409
    assert http.get("/streams/nothing").status_code == 404
    aggregate = {"name": "homes", "epsilon": 1.0, "bucket": "1h", "unit_window": "1d", "unit_bound": 5.0,
                 "upper_bound": 5.0, "clip": True, "seed": 2}
    assert http.post("/aggregates", json=aggregate, headers=auth).status_code == 201
    rows = {"times": [3600.0 * i for i in range(5)], "units": ["a", "b", "a", "c", "b"], "values": [1.0] * 5}
    assert http.post("/aggregates/homes/rows", json=rows, headers=auth).status_code == 200
    after = _scrape(http)

    def moved(metric, **labels):
        return _value(after, metric, **labels) - _value(before, metric, **labels)

    assert moved("dpstream_batches_total", kind="stream") == 2
    assert moved("dpstream_batches_total", kind="aggregate") == 1
    assert moved("dpstream_values_total", kind="stream") == 60
    assert not [key for key in after if key[0] == "dpstream_values_total" and ("kind", "aggregate") in key[1]]
    assert moved("dpstream_responses_total", status="401") == moved("dpstream_responses_total", status="409") == 1
    assert moved("dpstream_responses_total", status="404") == 1
    assert moved("dpstream_responses_total", status="200") >= 4
    values_route = {"method": "POST", "route": "/streams/{name}/values"}
    assert moved("dpstream_request_seconds_count", **values_route) == 5
    assert moved("dpstream_request_seconds_bucket", le="+Inf", **values_route) == 5
    published = http.get("/streams/load").json()["budget"]
    pure = {"delta": "0"}  # pure DP: the epsilon's delta label is 0
    assert _value(after, "dpstream_epsilon_spent", kind="stream", name="load", **pure) == published["epsilon_spent"] > 0
    assert _value(after, "dpstream_epsilon", kind="stream", name="load", **pure) == published["epsilon"]
    assert _value(after, "dpstream_epsilon", kind="aggregate", name="homes", **pure) == 1.0
    assert not [key for key in after if key[0] == "dpstream_rho"]  # no zCDP source
    assert _value(after, "dpstream_position", kind="stream", name="load") == 60
    assert ("dpstream_position", frozenset({"kind": "aggregate", "name": "homes"}.items())) not in after
    text = http.get("/metrics").text
    assert TOKEN not in text and "nothing" not in text  # no secret; no path of a request, only templates


def test_a_zcdp_sources_metrics_state_its_rho_and_the_delta_of_its_epsilon(http):
    """A zCDP stream's epsilon is implied at its target's delta: labelled with it, never read as pure DP; its rho,
    what zCDP sources add up, is a gauge of its own."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    stream = {"name": "z", "method": "bt-zcdp", "epsilon": 1.0, "delta": 1e-5, "upper_bound": 10.0, "max_range": 64,
              "seed": 1}
    assert http.post("/streams", json=stream, headers=auth).status_code == 201
    before = _scrape(http)
    assert http.post("/streams/z/values", json={"values": [1.0] * 5, "first_position": 0},
                     headers=auth).status_code == 200
    after = _scrape(http)
    published = http.get("/streams/z").json()["budget"]
    labels = {"kind": "stream", "name": "z"}
    assert published["delta"] == 1e-5 and published["rho"] > 0
    assert _value(after, "dpstream_epsilon", **labels, delta="1e-05") == published["epsilon"] <= 1.0
    assert _value(after, "dpstream_epsilon_spent", **labels, delta="1e-05") == published["epsilon_spent"] > 0
    assert not [key for key in after if key[0] == "dpstream_epsilon" and ("delta", "0") in key[1]]
    assert _value(after, "dpstream_rho", **labels) == _value(before, "dpstream_rho", **labels) == published["rho"]
    assert _value(before, "dpstream_rho_spent", **labels) == 0.0
    assert _value(after, "dpstream_rho_spent", **labels) == published["rho_spent"] == published["rho"]
