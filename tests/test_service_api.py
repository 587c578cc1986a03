"""The HTTP API of ``dpstream serve`` through FastAPI's TestClient, on SQLite."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from fastapi.testclient import TestClient

from dpstream.client import Client, ServiceError, ToPLClient
from dpstream.noise.bits import make_bits
from dpstream.release import PAK, BinaryTreeCounter, ToPLCollector, ToPS
from dpstream.service import create_app
from dpstream.service.app import MAX_LIMIT
from dpstream.service.mechanisms import derive_key
from dpstream.service.storage import SCHEMA_VERSION, ConflictError

TOKEN = "api-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TOPS = {"epsilon": 1.0, "upper_bound": 100.0, "hold": 200, "max_range": 4096}


@pytest.fixture
def app(tmp_path):
    application = create_app(database=f"sqlite:///{tmp_path}/api.db", token=TOKEN, max_body_bytes=4 * 1024 * 1024)
    yield application
    application.state.storage.close()


@pytest.fixture
def http(app):
    return TestClient(app)


def _stream(http, name="a", **params):
    answer = http.post("/streams", json={"name": name, **TOPS, "seed": 7, **params}, headers=AUTH)
    assert answer.status_code == 201, answer.text
    return answer.json()


def _values(n, seed=0):
    return np.random.default_rng(seed).integers(0, 60, n).astype(float)


def _everything(http, app, kind="stream", name="a"):
    """All a request could change: public facts, released values, secret state, ledger."""
    storage = app.state.storage
    source = storage.source(kind, name, secret=True)
    return (http.get(f"/{kind}s/{name}").json(), http.get(f"/{kind}s/{name}/released?limit={MAX_LIMIT}").json(),
            source.state, source.position, storage.ledger(source.id))


def test_a_stream_releases_what_the_library_releases_with_the_derived_key(http):
    described = _stream(http)
    assert described["position"] == 0 and described["threshold"] is None
    assert "seed" not in json.dumps(described["parameters"]) and "warning" in described
    values = _values(1000)
    released = http.post("/streams/a/values", json={"values": values[:600].tolist()}, headers=AUTH).json()["released"]
    released += http.post("/streams/a/values", json={"values": values[600:].tolist(), "first_position": 600},
                          headers=AUTH).json()["released"]
    expected = ToPS(**TOPS, key=derive_key(7)).release(values)
    assert [r["position"] for r in released] == list(range(200, 1000))
    assert [r["value"] for r in released] == expected.tolist()
    facts = http.get("/streams/a").json()
    assert facts["position"] == 1000 and facts["released"] == 800 and facts["threshold"] is not None
    assert facts["budget"]["epsilon_spent"] == facts["budget"]["epsilon"] <= 1.0
    assert "event level" in facts["privacy"]


def test_the_noise_depends_on_the_seed_and_parameters_not_on_the_name(http):
    values = _values(500).tolist()
    outputs = {}
    for name, seed in (("first", 7), ("second", 7), ("third", 8)):
        _stream(http, name, seed=seed)
        answer = http.post(f"/streams/{name}/values", json={"values": values}, headers=AUTH).json()
        outputs[name] = [r["value"] for r in answer["released"]]
    assert outputs["first"] == outputs["second"] != outputs["third"]


@pytest.mark.parametrize("params, match", [({"period": 10**15}, "the service takes period up to"),
                                           ({"period": 2**21, "max_range": 64}, None),
                                           ({"threshold_epsilon": 1e200}, "threshold_epsilon must be in"),
                                           ({"epsilon": 1e155}, "epsilon must be at most 1e154"),
                                           ({"epsilon": 1e100}, "must be in"),
                                           ({"epsilon": 1e300, "threshold_epsilon": 1.0}, "at most 1e154")])
def test_parameters_that_could_never_run_are_refused_at_creation(http, params, match):
    answer = http.post("/streams", json={"name": "a", **TOPS, "hold": 20, **params}, headers=AUTH)
    if match is None:  # within the limits: created, and it runs past its hold-out
        assert answer.status_code == 201
        ran = http.post("/streams/a/values", json={"values": _values(40).tolist()}, headers=AUTH)
        assert ran.status_code == 200 and len(ran.json()["released"]) == 20
    else:
        assert answer.status_code == 422 and match in answer.json()["message"]
        assert http.get("/streams/a").status_code == 404


def test_an_unseeded_stream_has_a_random_key(http, app):
    for name in ("x", "y"):
        assert http.post("/streams", json={"name": name, **TOPS}, headers=AUTH).status_code == 201
    keys = {app.state.storage.source("stream", n, secret=True).key for n in ("x", "y")}
    assert len(keys) == 2 and all(len(k) == 32 for k in keys)


def test_a_retry_is_answered_with_the_same_values_and_ingested_once(http, app):
    _stream(http)
    values = _values(300).tolist()
    first = http.post("/streams/a/values", json={"values": values, "first_position": 0}, headers=AUTH)
    before = _everything(http, app)
    again = http.post("/streams/a/values", json={"values": values, "first_position": 0}, headers=AUTH)
    assert again.status_code == 200 and again.json() == first.json()
    assert _everything(http, app) == before
    ledger = http.get("/streams/a/ledger").json()["ledger"]
    assert [(row["first_position"], row["count"]) for row in ledger] == [(0, 300)]
    assert ledger[0]["epsilon"] == http.get("/streams/a").json()["budget"]["epsilon"] and "digest" not in ledger[0]


def test_a_gap_and_a_different_batch_at_an_old_position_are_refused(http, app):
    _stream(http)
    http.post("/streams/a/values", json={"values": [1.0] * 300}, headers=AUTH)
    before = _everything(http, app)
    gap = http.post("/streams/a/values", json={"values": [1.0], "first_position": 301}, headers=AUTH)
    assert gap.status_code == 409 and "gap" in gap.json()["message"] and "position 300" in gap.json()["message"]
    other = http.post("/streams/a/values", json={"values": [2.0] * 300, "first_position": 0}, headers=AUTH)
    assert other.status_code == 409 and "not the one ingested there" in other.json()["message"]
    assert _everything(http, app) == before


def test_released_pages_from_after_and_caps_the_limit(http):
    assert http.post("/streams", json={"name": "c", "method": "bt", "epsilon": 1.0, "upper_bound": 10.0,
                                       "max_range": 1 << 15, "seed": 1}, headers=AUTH).status_code == 201
    times = np.arange(MAX_LIMIT + 5) * 60.0
    answer = http.post("/streams/c/values", json={"values": [1.0] * (MAX_LIMIT + 5), "times": times.tolist()},
                       headers=AUTH).json()["released"]
    expected = BinaryTreeCounter(epsilon=1.0, upper_bound=10.0, max_range=1 << 15, key=derive_key(1)).release(
        np.ones(MAX_LIMIT + 5))
    assert [r["value"] for r in answer] == expected.tolist() and answer[7]["time"] == 420.0
    page = http.get("/streams/c/released", params={"limit": 10 * MAX_LIMIT}).json()["released"]
    assert len(page) == MAX_LIMIT and page[0]["position"] == 0
    rest = http.get("/streams/c/released", params={"after": page[-1]["position"]}).json()["released"]
    assert [r["position"] for r in rest] == list(range(MAX_LIMIT, MAX_LIMIT + 5))
    assert http.get("/streams/c/released", params={"after": MAX_LIMIT + 4}).json() == {"released": []}
    assert http.get("/streams/c/released", params={"after": 2, "limit": 2}).json()["released"] == answer[3:5]


def test_lists_and_the_page_show_public_facts_only(http, app):
    _stream(http, "a")
    http.post("/streams/a/values", json={"values": [3.0] * 250}, headers=AUTH)
    secret = app.state.storage.source("stream", "a", secret=True)
    listed = http.get("/streams").text + http.get("/streams/a").text + http.get("/").text
    assert [s["name"] for s in http.get("/streams").json()["streams"]] == ["a"]
    assert secret.key.hex() not in listed and secret.key.hex()[:16] not in listed
    assert "dpstream.state" not in listed and "state" not in json.loads(http.get("/streams/a").text)
    assert 'src="static/dashboard.js"' in http.get("/").text
    assert http.get("/health").json() == {"status": "ok", "database": "sqlite", "schema_version": SCHEMA_VERSION,
                                          "secrets_encrypted": False}


# -- every bad request: a clear 4xx, and nothing changes ----------------------------------------

BAD_VALUES = [
    ("malformed JSON", b'{"values": [1, 2', 400, "not valid JSON"),
    ("not an object", b"[1, 2]", 422, "must be a JSON object"),
    ("values a string", b'{"values": "1, 2"}', 422, "values must be a list of numbers"),
    ("a string value", b'{"values": [1, "2"]}', 422, "values[1] must be a number"),
    ("a boolean value", b'{"values": [1, true]}', 422, "values[1] must be a number"),
    ("a null value", b'{"values": [null]}', 422, "values[0] must be a number"),
    ("NaN", b'{"values": [1, NaN]}', 400, "NaN is not a JSON number"),
    ("Infinity", b'{"values": [-Infinity]}', 400, "-Infinity is not a JSON number"),
    ("an overflowing number", b'{"values": [1e999]}', 422, "values[0] must be a finite number"),
    ("out of range", b'{"values": [1, 101]}', 422, "stream value at position 301 (0-based) must be in [0, 100]"),
    ("negative", b'{"values": [-1]}', 422, "stream value at position 300 (0-based) must be in [0, 100]"),
    ("no values", b'{"times": [1]}', 422, "a batch needs values"),
    ("empty values", b'{"values": []}', 422, "values must hold 1 to 100000 numbers, got 0"),
    ("unknown field", b'{"values": [1], "clip": true}', 422, "unknown field(s) clip"),
    ("times of another length", b'{"values": [1, 2], "times": [1]}', 422, "times must have one entry per value"),
    ("a time that is text", b'{"values": [1], "times": ["noon"]}', 422, "times[0] must be a number"),
    ("negative first_position", b'{"values": [1], "first_position": -1}', 422, "first_position must be an integer"),
    ("fractional first_position", b'{"values": [1], "first_position": 1.5}', 422, "first_position must be an integer"),
    ("nested too deeply", b'{"values": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "nested too deeply"),
]


@pytest.mark.parametrize("body, status, message", [case[1:] for case in BAD_VALUES],
                         ids=[case[0] for case in BAD_VALUES])
def test_a_bad_batch_is_refused_and_changes_nothing(http, app, body, status, message):
    _stream(http)
    http.post("/streams/a/values", json={"values": [5.0] * 300}, headers=AUTH)
    before = _everything(http, app)
    answer = http.post("/streams/a/values", content=body, headers={**AUTH, "Content-Type": "application/json"})
    assert answer.status_code == status and message in answer.json()["message"], answer.text
    assert answer.json()["status"] == status
    assert _everything(http, app) == before
    follow = http.post("/streams/a/values", json={"values": [5.0], "first_position": 300}, headers=AUTH)
    assert follow.status_code == 200  # the stream goes on where it was


@pytest.mark.parametrize("headers, status, message", [
    ({}, 401, "needs the header Authorization: Bearer TOKEN"),
    ({"Authorization": "Basic abc"}, 401, "needs the header"),
    ({"Authorization": "Bearer wrong-token-wrong-token"}, 403, "token is wrong"),
], ids=["missing token", "other scheme", "wrong token"])
def test_writes_need_the_token(http, app, headers, status, message):
    _stream(http)
    before = _everything(http, app)
    for path, body in (("/streams/a/values", {"values": [1.0]}), ("/streams", {"name": "b", **TOPS}),
                       ("/collectors", {"name": "c", **TOPS}), ("/collectors/c/reports", {})):
        answer = http.post(path, json=body, headers=headers)
        assert answer.status_code == status and message in answer.json()["message"], (path, answer.text)
    assert _everything(http, app) == before
    assert http.get("/streams").json()["streams"][0]["name"] == "a" and len(http.get("/streams").json()["streams"]) == 1


def test_an_oversized_body_is_refused(http, app):
    _stream(http)
    before = _everything(http, app)
    big = b'{"values": [' + b"1.0," * (1024 * 1024) + b"1.0]}"
    answer = http.post("/streams/a/values", content=big, headers={**AUTH, "Content-Type": "application/json"})
    assert answer.status_code == 413 and "larger than the limit of 4194304 bytes" in answer.json()["message"]
    assert _everything(http, app) == before


def test_unknown_streams_collectors_and_endpoints_are_404(http):
    for method, path in (("GET", "/streams/nope"), ("GET", "/streams/nope/released"), ("GET", "/streams/nope/events"),
                         ("POST", "/streams/nope/values"), ("GET", "/collectors/nope/parameters"),
                         ("POST", "/collectors/nope/reports"), ("GET", "/nothing-here")):
        body = {"values": [1.0]} if path.endswith("values") else None
        if path.endswith("reports"):
            body = {"format": "dpstream.topl.reports/1", "parameters": "x", "mechanism": [0], "report": [1]}
        answer = http.request(method, path, json=body, headers=AUTH)
        assert answer.status_code == 404 and answer.json()["message"], (path, answer.text)


@pytest.mark.parametrize("query, message", [
    ("after=x", "after must be an integer >= -1"), ("after=-2", "after must be an integer >= -1"),
    ("limit=0", "limit must be an integer >= 1"), ("limit=1e3", "limit must be an integer >= 1"),
])
def test_bad_query_parameters_are_422(http, query, message):
    _stream(http)
    answer = http.get(f"/streams/a/released?{query}")
    assert answer.status_code == 422 and message in answer.json()["message"]


@pytest.mark.parametrize("body, status, message", [
    ({"name": "b", "upper_bound": 100.0}, 422, "a stream needs epsilon"),
    ({"name": "b", "epsilon": -1.0, "upper_bound": 100.0}, 422, "epsilon"),
    ({"name": "b", "epsilon": 1.0, "upper_bound": "100"}, 422, "upper_bound"),
    ({"name": "b", "epsilon": 1.0, "upper_bound": 100.0, "method": "magic"}, 422, "method must be one of"),
    ({"name": "b", "epsilon": 1.0, "upper_bound": 100.0, "hold": 0}, 422, "hold"),
    ({"name": "b", "epsilon": 1.0, "upper_bound": 100.0, "windowz": 3}, 422, "takes no parameter 'windowz'"),
    ({"name": "b", "epsilon": 1.0, "upper_bound": 100.0, "max_range": 2**30}, 422, "takes max_range up to 4194304"),
    ({"name": "b", "epsilon": 1.0, "upper_bound": 100.0, "hold": 10**9}, 422, "takes hold up to 4194304"),
    ({"name": "b", "epsilon": 1.0, "upper_bound": 100.0, "smoother": {"x": 1}}, 422, "smoother must be a number"),
    ({"name": "b", "epsilon": 1.0, "upper_bound": 100.0, "seed": "7"}, 422, "seed must be a non-negative integer"),
    ({"name": "b", "epsilon": 1.0, "upper_bound": 100.0, "noise": "zero"}, 422, "takes no parameter 'noise'"),
    ({"name": "a b", "epsilon": 1.0, "upper_bound": 100.0}, 422, "name must be 1 to 64 letters"),
    ({"name": "b\n", "epsilon": 1.0, "upper_bound": 100.0}, 422, "name must be 1 to 64 letters"),
    ({"name": "b", "epsilon": 1.0, "upper_bound": 10**400}, 422, "upper_bound must be a finite number, got an integer "
     "of 401 digits"),
    ({"name": "b", "epsilon": 10**400, "upper_bound": 100.0}, 422, "epsilon must be a finite number"),
    ({"epsilon": 1.0, "upper_bound": 100.0}, 422, "name must be"),
    ({"name": "a", "epsilon": 1.0, "upper_bound": 100.0}, 409, "a stream named 'a' exists already"),
])
def test_a_bad_stream_is_not_created(http, app, body, status, message):
    _stream(http)
    before = http.get("/streams").json()
    answer = http.post("/streams", json=body, headers=AUTH)
    assert answer.status_code == status and message in answer.json()["message"], answer.text
    assert http.get("/streams").json() == before


# -- collectors --------------------------------------------------------------------------------

COLLECTOR = {"epsilon": 2.0, "upper_bound": 100.0, "hold": 500, "max_range": 4096, "buckets": 64}


def _collector(http, name="c", **params):
    answer = http.post("/collectors", json={"name": name, **COLLECTOR, **params}, headers=AUTH)
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_the_topl_client_reports_and_the_collector_releases_what_the_library_does(http):
    _collector(http)
    values = _values(1500, seed=3)
    client = ToPLClient("http://testserver", "c", TOKEN, bits=11, http=http)
    released = client.send(values)  # threshold reports up to hold, then HM reports once theta is out
    facts = http.get("/collectors/c").json()
    assert facts["threshold"] is not None and facts["position"] == 1500
    assert [r["position"] for r in released] == list(range(500, 1500))
    # the same reports fed to the library's collector give the same theta and estimates
    local, bits = ToPLCollector(**COLLECTOR), make_bits(11)
    first = local.client().report_batch(values[:500], bits=bits)
    local.receive_batch(first.mechanism, first.report)
    second = local.client().report_batch(values[500:], bits=bits)
    assert local.threshold == facts["threshold"]
    assert np.array_equal(local.receive_batch(second.mechanism, second.report), [r["value"] for r in released])
    assert Client("http://testserver", http=http).released("c", kind="collectors", limit=3) == released[:3]


def test_reports_for_another_collector_or_from_a_stale_client_are_409(http, app):
    _collector(http, "c")
    _collector(http, "d", epsilon=1.0)
    parameters_c = http.get("/collectors/c/parameters").text
    from dpstream.release import ToPLRandomizer as Local

    stale = Local.from_json(parameters_c).report_batch(_values(10), bits=1).to_json()
    wrong = Local.from_json(http.get("/collectors/d/parameters").text).report_batch(_values(10), bits=1).to_json()
    before = _everything(http, app, "collector", "c")
    answer = http.post("/collectors/c/reports", content=wrong, headers=AUTH)
    assert answer.status_code == 409 and "fetch its current parameters" in answer.json()["message"]
    assert _everything(http, app, "collector", "c") == before
    ToPLClient("http://testserver", "c", TOKEN, bits=2, http=http).send(_values(500))  # theta is published
    assert http.get("/collectors/c/parameters").text != parameters_c
    before = _everything(http, app, "collector", "c")
    answer = http.post("/collectors/c/reports", content=stale, headers=AUTH)
    assert answer.status_code == 409 and "theta = " in answer.json()["message"]
    assert _everything(http, app, "collector", "c") == before


@pytest.mark.parametrize("body, message", [
    ('{"format": "dpstream.topl.reports/0"}', 'must have "format": "dpstream.topl.reports/1"'),
    ('{"format": "dpstream.topl.reports/1", "parameters": "x", "mechanism": [0], "report": [1.5]}', "not an integer"),
    ('{"format": "dpstream.topl.reports/1", "parameters": "x", "mechanism": [7], "report": [1]}', "mechanism at"),
    ('{"format": "dpstream.topl.reports/1", "parameters": "x", "mechanism": [], "report": []}', "1 to 100000 reports"),
])
def test_malformed_reports_are_422(http, app, body, message):
    _collector(http)
    before = _everything(http, app, "collector", "c")
    answer = http.post("/collectors/c/reports", content=body, headers=AUTH)
    assert answer.status_code == 422 and message in answer.json()["message"], answer.text
    assert _everything(http, app, "collector", "c") == before


def test_an_off_grid_report_is_refused_and_changes_nothing(http, app):
    _collector(http)
    document = json.loads(ToPLClient("http://testserver", "c", TOKEN, bits=4, http=http).parameters()
                          .report_batch(_values(5), bits=4).to_json())
    document["report"][2] = 10**9
    before = _everything(http, app, "collector", "c")
    answer = http.post("/collectors/c/reports", content=json.dumps(document), headers=AUTH)
    assert answer.status_code == 422 and "report" in answer.json()["message"]
    assert _everything(http, app, "collector", "c") == before


def test_a_bad_collector_is_not_created(http):
    for body, message in (({"name": "c", "upper_bound": 1.0}, "needs epsilon"),
                          ({"name": "c", "epsilon": 1.0, "upper_bound": 1.0, "variant": "X"}, "variant"),
                          ({"name": "c", "epsilon": 1.0, "upper_bound": 1.0, "seed": 3}, "takes no parameter 'seed'"),
                          ({"name": "c", "epsilon": 1.0, "upper_bound": 10**400}, "integer of 401 digits")):
        answer = http.post("/collectors", json=body, headers=AUTH)
        assert answer.status_code == 422 and message in answer.json()["message"], answer.text
    assert http.get("/collectors").json() == {"collectors": []}


def test_the_python_client_raises_service_errors(http):
    client = Client("http://testserver", TOKEN, http=http)
    client.create_stream("a", **TOPS, seed=1)
    with pytest.raises(ServiceError) as error:
        client.send("a", [1.0], first_position=5)
    assert error.value.status == 409 and "gap" in error.value.message
    assert client.send("a", _values(250), first_position=0)[0]["position"] == 200
    assert len(list(client.all_released("a"))) == 50 and client.stream("a")["position"] == 250


def test_a_retried_reports_batch_is_answered_once(http, app):
    _collector(http)
    local = ToPLClient("http://testserver", "c", TOKEN, bits=5, http=http)
    local.send(_values(500))  # theta is published
    document = local.parameters().report_batch(_values(20), bits=6).to_json()
    first = http.post("/collectors/c/reports?first_position=500", content=document, headers=AUTH)
    before = _everything(http, app, "collector", "c")
    again = http.post("/collectors/c/reports?first_position=500", content=document, headers=AUTH)
    assert first.status_code == again.status_code == 200 and again.json() == first.json()
    assert [r["position"] for r in first.json()["released"]] == list(range(500, 520))
    other = local.parameters().report_batch(_values(20, seed=9), bits=7).to_json()
    assert http.post("/collectors/c/reports?first_position=500", content=other, headers=AUTH).status_code == 409
    assert _everything(http, app, "collector", "c") == before


def test_a_pak_stream_restarted_between_batches_releases_the_library_s_increments(tmp_path):
    params = {"epsilon": 1.0, "upper_bound": 50.0, "hold": 300, "max_range": 1024}
    url = f"sqlite:///{tmp_path}/pak.db"
    values = _values(800) * (50 / 60)
    released = []
    for start in range(0, 800, 250):  # a new service each batch: the mechanism comes back from its stored state
        service = create_app(database=url, token=TOKEN)
        http = TestClient(service)
        if start == 0:
            answer = http.post("/streams", json={"name": "p", "method": "pak", **params, "seed": 4}, headers=AUTH)
            assert answer.status_code == 201, answer.text
        answer = http.post("/streams/p/values", json={"values": values[start:start + 250].tolist()}, headers=AUTH)
        assert answer.status_code == 200, answer.text
        released += answer.json()["released"]
        facts = http.get("/streams/p").json()
        service.state.storage.close()
    expected = PAK(**params, key=derive_key(4))
    assert [r["value"] for r in released] == expected.release(values).tolist()
    assert facts["held_sum"] == expected.held_sum and facts["position"] == 800


@pytest.mark.parametrize("method", ["tops", "bt", "pak"])
def test_a_seeded_stream_releases_what_release_seed_state_writes(http, tmp_path, method):
    from click.testing import CliRunner

    from dpstream.cli import cli

    values = np.round(np.random.default_rng(1).gamma(2.0, 4.0, size=3000).clip(0, 50), 2)
    (tmp_path / "in.txt").write_text("".join(f"{v:g}\n" for v in values))
    shape = ["--max-range", "4096"] + ([] if method == "bt" else ["--hold", "500"])
    result = CliRunner().invoke(cli, ["release", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"),
                                      "--state", str(tmp_path / "state"), "--epsilon", "1", "--upper-bound", "50",
                                      "--method", method, *shape, "--seed", "9"])
    assert result.exit_code == 0, result.output
    params = {"max_range": 4096, **({} if method == "bt" else {"hold": 500})}
    assert http.post("/streams", json={"name": "s", "method": method, "epsilon": 1, "upper_bound": 50, **params,
                                       "seed": 9}, headers=AUTH).status_code == 201
    released = http.post("/streams/s/values", json={"values": values.tolist()}, headers=AUTH).json()["released"]
    assert "".join(f"{r['value']!r}\n" for r in released) == (tmp_path / "out.txt").read_text()


# -- the application's shape: writes behind the token, an OpenAPI document of the path parameters only -------

def test_every_write_route_needs_the_token_and_no_read_route_does(http, app):
    routes = [(method.upper(), path.replace("{name}", "nope").replace("{token_id}", "nope"))
              for path, item in app.openapi()["paths"].items() for method in item]
    assert {method for method, _ in routes} == {"GET", "POST", "DELETE"} and len(routes) == 31  # 3 of /budgets
    for method, path in routes:
        answer = http.request(method, path, content=b"{}")
        if method in ("POST", "DELETE") or path == "/tokens":  # the list of tokens is an admin's read
            assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Bearer", (path, answer.text)
        else:  # a read: public (the lists and health) or a 404 for the stream or collector that does not exist
            assert answer.status_code in (200, 404), (path, answer.text)
    assert TOKEN not in repr(app.state.settings)


def test_the_openapi_document_has_path_parameters_only(app):
    operations = [(path, operation) for path, item in app.openapi()["paths"].items() for operation in item.values()]
    assert len(operations) == 31  # with POST /budgets, GET /budgets, GET /budgets/{name}
    for path, operation in operations:  # the token, the body and the query are read from the request itself
        names = [(parameter["name"], parameter["in"]) for parameter in operation.get("parameters", [])]
        assert names == [(name, "path") for name in re.findall(r"\{(\w+)\}", path)], (path, names)
        assert "requestBody" not in operation, path


def test_a_batch_that_loses_a_race_is_409_and_the_stream_goes_on_from_the_database(http, app, tmp_path,
                                                                                    monkeypatch):
    other = create_app(database=f"sqlite:///{tmp_path}/api.db", token=TOKEN)  # a second process, the same database
    values = _values(700)
    _stream(http)
    released = http.post("/streams/a/values", json={"values": values[:300].tolist()}, headers=AUTH).json()["released"]
    answer = TestClient(other).post("/streams/a/values", json={"values": values[300:400].tolist()}, headers=AUTH)
    released += answer.json()["released"]
    # the first process's mechanism is behind the database: it reloads, and answers as the database stands
    lost = http.post("/streams/a/values", json={"values": [1.0] * 5, "first_position": 300}, headers=AUTH)
    assert lost.status_code == 409 and "is at position 400" in lost.json()["message"]
    assert "not the one ingested there" in lost.json()["message"]
    again = http.post("/streams/a/values", json={"values": values[300:400].tolist(), "first_position": 300},
                      headers=AUTH)
    assert again.json() == answer.json()  # the other process's batch, recognized by the ledger
    released += http.post("/streams/a/values", json={"values": values[400:500].tolist(), "first_position": 400},
                          headers=AUTH).json()["released"]
    with monkeypatch.context() as patch:  # every commit finds the stream moved on: refused after a few tries
        def moved(**batch):
            raise ConflictError(f"the source moved past position {batch['first_position']} while this batch was "
                                "ingested.")
        patch.setattr(other.state.storage, "commit_batch", moved)
        lost = TestClient(other).post("/streams/a/values", json={"values": values[500:].tolist()}, headers=AUTH)
    assert lost.status_code == 409 and "moved past position 500" in lost.json()["message"]
    assert "Retry the batch" in lost.json()["message"]
    last = TestClient(other).post("/streams/a/values", json={"values": values[500:].tolist(), "first_position": 500},
                                  headers=AUTH)
    released += last.json()["released"]
    other.state.storage.close()
    assert [r["value"] for r in released] == ToPS(**TOPS, key=derive_key(7)).release(values).tolist()


def test_a_failure_while_committing_is_500_and_the_batch_can_be_sent_again(app, monkeypatch):
    http = TestClient(app, raise_server_exceptions=False)
    values = _values(600)
    _stream(http)
    released = http.post("/streams/a/values", json={"values": values[:300].tolist()}, headers=AUTH).json()["released"]
    with monkeypatch.context() as patch:
        patch.setattr(app.state.storage, "commit_batch", lambda **batch: 1 / 0)
        failed = http.post("/streams/a/values", json={"values": values[300:].tolist()}, headers=AUTH)
    assert failed.status_code == 500 and "never ingested twice" in failed.json()["message"]
    assert http.get("/streams/a").json()["position"] == 300
    released += http.post("/streams/a/values", json={"values": values[300:].tolist(), "first_position": 300},
                          headers=AUTH).json()["released"]
    assert [r["value"] for r in released] == ToPS(**TOPS, key=derive_key(7)).release(values).tolist()
