"""Scoped tokens: every role on every route of the application, allowed and refused; tokens issued, listed and
revoked (at once, in another process too); hashed at rest; a contributor's batch size and rate, counted in the
database and reset with its window; schema version 4 from 3; the access log without secrets."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from dpstream.cli import cli
from dpstream.client import Client, ServiceError, ToPLClient
from dpstream.noise.bits import make_bits
from dpstream.release import ToPLRandomizer
from dpstream.service import create_app, open_storage
from dpstream.service.access_log import AccessLog
from dpstream.service.storage import SCHEMA_VERSION
from dpstream.service.tokens import RateLimited, TokenStore, token_spec
from service_helpers import SOURCE, ServeProcess

TOKEN = "tokens-test-token-0123456789"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
TOPS = {"epsilon": 1.0, "upper_bound": 100.0, "hold": 200, "max_range": 4096, "seed": 7}
COLLECTOR = {"epsilon": 2.0, "upper_bound": 100.0, "hold": 500, "max_range": 4096, "buckets": 64}
AGGREGATE = {"epsilon": 1.0, "bucket": "1h", "unit_window": "1d", "unit_bound": 5, "upper_bound": 5.0, "seed": 3}

#: Who may call each route: "public", "admin", or (role, kind) for the source named in the path.  A route of the
#: application missing here fails test_the_table_names_every_route_of_the_application: decide its scope first.
POLICY = {
    ("GET", "/"): "public", ("GET", "/static"): "public", ("GET", "/docs"): "public",
    ("GET", "/docs/oauth2-redirect"): "public", ("GET", "/docs-static"): "public", ("GET", "/openapi.json"): "public",
    ("GET", "/metrics"): "public", ("GET", "/health"): "public",
    ("GET", "/streams"): "public", ("POST", "/streams"): "admin", ("GET", "/streams/{name}"): "public",
    ("DELETE", "/streams/{name}"): "admin", ("POST", "/streams/{name}/values"): ("producer", "stream"),
    ("GET", "/streams/{name}/ledger"): "public", ("GET", "/streams/{name}/released"): "public",
    ("GET", "/streams/{name}/events"): "public",
    ("GET", "/collectors"): "public", ("POST", "/collectors"): "admin", ("GET", "/collectors/{name}"): "public",
    ("DELETE", "/collectors/{name}"): "admin", ("GET", "/collectors/{name}/parameters"): "public",
    ("POST", "/collectors/{name}/reports"): ("contributor", "collector"),
    ("GET", "/collectors/{name}/released"): "public", ("GET", "/collectors/{name}/ledger"): "public",
    ("GET", "/collectors/{name}/events"): "public",
    ("GET", "/aggregates"): "public", ("POST", "/aggregates"): "admin", ("GET", "/aggregates/{name}"): "public",
    ("DELETE", "/aggregates/{name}"): "admin", ("POST", "/aggregates/{name}/rows"): ("producer", "aggregate"),
    ("GET", "/aggregates/{name}/released"): "public", ("GET", "/aggregates/{name}/ledger"): "public",
    ("POST", "/tokens"): "admin", ("GET", "/tokens"): "admin", ("DELETE", "/tokens/{token_id}"): "admin",
    ("POST", "/budgets"): "admin", ("GET", "/budgets"): "public", ("GET", "/budgets/{name}"): "public",
}

#: The tokens every route is tried with: what each is created with (None: not a token of the database).
HOLDERS = {
    "admin": {"role": "admin"},
    "producer of x": {"role": "producer", "streams": ["x"], "aggregates": ["x"]},
    "producer of every stream": {"role": "producer", "streams": ["*"]},
    "producer of y": {"role": "producer", "streams": ["y"], "aggregates": ["y"]},
    "contributor of x": {"role": "contributor", "collector": "x", "rate": 10, "window": "1h"},
    "contributor of y": {"role": "contributor", "collector": "y"},
    "reader": {"role": "reader"},
    "revoked admin": {"role": "admin"},
}


def _routes(routes, prefix=""):
    """(method, path template) of every route of the application, mounts and included routers too."""
    for route in routes:
        if hasattr(route, "include_context"):  # an included router
            yield from _routes(route.original_router.routes, prefix + route.include_context.prefix)
        elif getattr(route, "methods", None):
            yield from ((method, prefix + route.path) for method in route.methods - {"HEAD"})
        else:  # a mount of files
            yield "GET", prefix + route.path


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """An application with a stream, a collector and an aggregate named x, and a token of every holder."""
    app = create_app(database=f"sqlite:///{tmp_path_factory.mktemp('tokens')}/tokens.db", token=TOKEN)
    http = TestClient(app)
    for kind, params in (("streams", TOPS), ("collectors", COLLECTOR), ("aggregates", AGGREGATE)):
        assert http.post(f"/{kind}", json={"name": "x", **params}, headers=ADMIN).status_code == 201
    tokens = {}
    for holder, document in HOLDERS.items():
        answer = http.post("/tokens", json={**document, "note": holder}, headers=ADMIN)
        assert answer.status_code == 201, answer.text
        tokens[holder] = answer.json()
    assert http.delete(f"/tokens/{tokens['revoked admin']['id']}", headers=ADMIN).status_code == 200
    yield app, http, tokens
    app.state.storage.close()


def test_the_table_names_every_route_of_the_application(served):
    app, _, _ = served
    assert set(_routes(app.routes)) == set(POLICY)


def _allowed(policy, holder: str) -> bool:
    if policy == "public" or holder in ("bootstrap", "admin"):
        return True
    if policy == "admin":
        return False
    role, kind = policy
    return holder == f"{role} of x" or (holder == "producer of every stream" and kind == "stream")


def _request(http, method, template, headers):
    """The route called on source x with a body refused for what it holds (422), or a token that does not exist
    (404): an allowed call changes nothing."""
    path = template.replace("{name}", "x").replace("{token_id}", "nope")
    path = {"/static": "/static/dashboard.css", "/docs-static": "/docs-static/swagger-ui.css"}.get(path, path)
    if path.endswith("/events"):
        path += "?after=999999"  # an allowed call must end: read the headers only
        with http.stream(method, path, headers=headers) as answer:
            return answer.status_code, {}
    if method == "DELETE" and not path.startswith("/tokens"):
        path = path.replace("/x", "/nope")  # allowed: 404, nothing archived
    answer = http.request(method, path, content=b"{}" if method == "POST" else None,
                          headers={**headers, "Content-Type": "application/json"})
    return answer.status_code, answer.json() if "json" in answer.headers.get("content-type", "") else {}


@pytest.mark.parametrize("route", sorted(POLICY, key=str), ids=lambda route: " ".join(route))
def test_every_role_is_allowed_or_refused_with_the_scope_named(served, route):
    _, http, tokens = served
    policy = POLICY[route]
    holders = {"nobody": {}, "wrong token": {"Authorization": "Bearer dpst_" + "A" * 43}, "bootstrap": ADMIN,
               **{holder: {"Authorization": f"Bearer {facts['token']}"} for holder, facts in tokens.items()}}
    for holder, headers in holders.items():
        status, answer = _request(http, *route, headers)
        if policy == "public" or (_allowed(policy, holder) and holder != "revoked admin"):
            assert status not in (401, 403), (holder, status, answer)
            continue
        needs = "the scope 'admin'" if policy == "admin" else f"the scope '{policy[0]}' for {policy[1]} 'x'"
        if holder == "nobody":
            assert status == 401 and needs in answer["message"], (holder, answer)
        elif holder == "wrong token":
            assert status == 403 and "token is wrong" in answer["message"] and needs in answer["message"]
        elif holder == "revoked admin":
            assert status == 403 and f"token {tokens[holder]['id']} was revoked" in answer["message"], answer
        else:
            assert status == 403 and f"this endpoint needs {needs}; token {tokens[holder]['id']} is a " \
                f"{HOLDERS[holder]['role']}" in answer["message"], (holder, answer)
        assert answer["status"] == status


def test_an_aggregate_s_rows_consumed_are_shown_to_an_admin_and_a_reader_only(served):
    _, http, tokens = served
    for holder, facts in {"bootstrap": {"token": TOKEN}, **tokens}.items():
        shown = http.get("/aggregates/x", headers={"Authorization": f"Bearer {facts['token']}"}).json()
        assert ("position" in shown) == (holder in ("bootstrap", "admin", "reader")), holder
    assert "position" not in http.get("/aggregates/x").json()


def test_tokens_are_listed_without_secrets_and_bad_requests_are_422(served):
    app, http, tokens = served
    listed = http.get("/tokens", headers=ADMIN).json()["tokens"]
    assert [token["note"] for token in listed] == list(HOLDERS)
    text = json.dumps(listed)
    assert "dpst_" not in text and "digest" not in text
    assert {token["id"]: token["revoked"] is not None for token in listed}[tokens["revoked admin"]["id"]]
    contributor = next(token for token in listed if token["note"] == "contributor of x")
    assert contributor | {"created": None} == {"id": tokens["contributor of x"]["id"], "role": "contributor",
                                              "scope": ["collector:x"], "note": "contributor of x", "rate": 10,
                                              "window": "1h", "max_batch": 10, "created": None, "revoked": None}
    for document, message in (({"role": "root"}, "role must be one of"),
                              ({"role": "contributor"}, "needs collector"),
                              ({"role": "contributor", "collector": "x", "rate": 5, "max_batch": 6},
                               "max_batch must be an integer from 1 to 5"),
                              ({"role": "producer", "streams": ["bad name"]}, "is not a stream name"),
                              ({"role": "reader", "collector": "x"}, "a reader token takes no 'collector'")):
        answer = http.post("/tokens", json=document, headers=ADMIN)
        assert answer.status_code == 422 and message in answer.json()["message"], answer.text
    assert http.delete("/tokens/nope", headers=ADMIN).status_code == 404


def _reports(http, count, seed=0, collector="x"):
    """A reports document of ``count`` values, randomized as a client would with the collector's parameters."""
    client = ToPLRandomizer.from_json(http.get(f"/collectors/{collector}/parameters").text)
    values = np.random.default_rng(seed).integers(0, 100, count).astype(float)
    return client.report_batch(values, bits=make_bits(seed)).to_json()


def test_a_contributor_s_rate_is_counted_in_the_database_and_resets_with_its_window(tmp_path):
    app = create_app(database=f"sqlite:///{tmp_path}/rate.db", token=TOKEN)
    now = [1_000_000.0]  # the seconds the windows count in: a window of 1 minute starts at 999,960
    app.state.tokens.clock = lambda: now[0]
    try:
        http = TestClient(app)
        http.post("/collectors", json={"name": "x", **COLLECTOR}, headers=ADMIN)
        token = http.post("/tokens", json={"role": "contributor", "collector": "x", "rate": 30, "window": "1m",
                                           "max_batch": 20}, headers=ADMIN).json()
        auth = {"Authorization": f"Bearer {token['token']}", "Content-Type": "application/json"}

        def send(count, first, seed):
            return http.post(f"/collectors/x/reports?first_position={first}", content=_reports(http, count, seed),
                             headers=auth)

        assert send(20, 0, 1).status_code == 200 and send(10, 20, 2).status_code == 200  # 30 of 30
        refused = send(1, 30, 3)
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "20", refused.text
        assert "may send 30 reports every 1m" in refused.json()["message"]
        too_big = send(21, 30, 4)
        assert too_big.status_code == 413 and "at most 20 reports a batch, got 21" in too_big.json()["message"]
        assert http.get("/collectors/x").json()["position"] == 30  # refused batches changed nothing
        now[0] += 19.0  # still the same window
        assert send(1, 30, 3).status_code == 429
        now[0] += 1.0  # the next window
        assert send(20, 30, 5).status_code == 200 and send(10, 50, 6).status_code == 200
        assert send(1, 60, 7).status_code == 429
        admin = http.post("/collectors/x/reports?first_position=60", content=_reports(http, 50, 8),
                          headers={**ADMIN, "Content-Type": "application/json"})
        assert admin.status_code == 200  # an admin has no rate
    finally:
        app.state.storage.close()


def test_the_rate_is_one_count_for_every_process(database_url):
    spec = token_spec({"role": "contributor", "collector": "x", "rate": 10, "window": "1h", "max_batch": 4})
    first, second = open_storage(database_url), open_storage(database_url)  # two processes' connections
    try:
        stores = [TokenStore(first, clock=lambda: 7200.5), TokenStore(second, clock=lambda: 7200.5)]
        _, principal = stores[0].create(spec)
        outcomes = []
        for i, count in enumerate([4, 4, 2, 1, 4, 2]):  # 4 + 4 + 2 = 10 reports pass, from either store
            try:
                stores[i % 2].charge(principal, count)
                outcomes.append(True)
            except RateLimited as error:
                assert "retry in 3600 s" in str(error) and error.retry_after == 3600
                outcomes.append(False)
        assert outcomes == [True, True, True, False, False, False]
        stores[1].clock = lambda: 10800.0  # the next window, seen by the other process
        stores[1].charge(principal, 4)
        if database_url.startswith("sqlite"):  # counted without waiting for the disk, then durable again
            assert first._query("PRAGMA synchronous") == second._query("PRAGMA synchronous") == [(2,)]
        stores[0].revoke(principal.id)  # after the request's token was read: refused, nothing counted
        with pytest.raises(PermissionError, match=f"token {principal.id} was revoked"):
            stores[1].charge(principal, 1)
    finally:
        first.close()
        second.close()


def test_revocation_holds_at_once_in_another_process_and_the_cli_issues_tokens(tmp_path):
    database = f"sqlite:///{tmp_path}/two.db"
    log = tmp_path / "access.log"
    created = subprocess.run([sys.executable, "-m", "dpstream.cli", "token", "create", "--role", "contributor",
                              "--collector", "x", "--rate", "1000", "--database", database],
                             capture_output=True, text=True, env={"PYTHONPATH": str(SOURCE)}, check=True)
    contributor = json.loads(created.stdout)  # one JSON line: what a test of another client reads
    assert contributor["token"].startswith("dpst_") and contributor["scope"] == ["collector:x"]
    servers = [ServeProcess(database, token=TOKEN, options=("--access-log", str(log))).launch(),
               ServeProcess(database, token=TOKEN).launch()]
    try:
        for server in servers:
            server.wait()
        import httpx

        first, second = (httpx.Client(base_url=server.url) for server in servers)
        assert first.post("/collectors", json={"name": "x", **COLLECTOR}, headers=ADMIN).status_code == 201
        auth = {"Authorization": f"Bearer {contributor['token']}", "Content-Type": "application/json"}
        assert first.post("/collectors/x/reports?first_position=0", content=_reports(first, 10),
                          headers=auth).status_code == 200
        assert second.delete(f"/tokens/{contributor['id']}", headers=ADMIN).status_code == 200
        refused = first.post("/collectors/x/reports?first_position=10", content=_reports(first, 10, 1), headers=auth)
        assert refused.status_code == 403 and "was revoked" in refused.json()["message"]
        limited = second.post("/tokens", json={"role": "contributor", "collector": "x", "rate": 20},
                              headers=ADMIN).json()
        auth = {**auth, "Authorization": f"Bearer {limited['token']}"}
        sent = [client.post(f"/collectors/x/reports?first_position={first_position}",
                            content=_reports(first, 10, first_position), headers=auth).status_code
                for client, first_position in ((second, 10), (first, 20), (second, 30))]
        assert sent == [200, 200, 429]  # one count for both processes
        first.close()
        second.close()
    finally:
        for server in servers:
            server.stop()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["method"], line["path"], line["status"], line["token"]) for line in lines if
            line["path"] != "/health"] == [
        ("POST", "/collectors", 201, "bootstrap"), ("GET", "/collectors/x/parameters", 200, None),
        ("POST", "/collectors/x/reports", 200, contributor["id"]), ("GET", "/collectors/x/parameters", 200, None),
        ("POST", "/collectors/x/reports", 403, contributor["id"]), ("GET", "/collectors/x/parameters", 200, None),
        ("GET", "/collectors/x/parameters", 200, None), ("POST", "/collectors/x/reports", 200, limited["id"]),
        ("GET", "/collectors/x/parameters", 200, None)]  # the other batches of the limited token went to the other
    assert all(line["seconds"] >= 0 and line["client"] == "127.0.0.1" for line in lines)
    text = log.read_text()
    assert contributor["token"] not in text and TOKEN not in text and "first_position" not in text


def test_the_database_never_holds_a_token_in_clear(database_url, tmp_path):
    app = create_app(database=database_url, token=TOKEN)
    storage = app.state.storage
    try:
        http = TestClient(app)
        issued = [http.post("/tokens", json=document, headers=ADMIN).json()["token"] for document in HOLDERS.values()]
        for token in issued:  # used, listed and revoked too
            http.get("/aggregates", headers={"Authorization": f"Bearer {token}"})
        http.get("/tokens", headers=ADMIN)
        http.delete(f"/tokens/{http.get('/tokens', headers=ADMIN).json()['tokens'][0]['id']}", headers=ADMIN)
        with storage._transaction() as cursor:
            tables = storage._tables(cursor)
        cells = [repr(cell) for table in tables for row in storage._query(f"SELECT * FROM {table}") for cell in row]
    finally:
        storage.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("service.db"))  # SQLite's files
    assert len(raw) > 4096 or database_url.startswith("postgresql")
    for secret in [*issued, TOKEN]:
        body = secret.removeprefix("dpst_")
        assert not any(body in cell for cell in cells) and body.encode() not in raw
    digests = [row for row in cells if re.fullmatch(r"'[0-9a-f]{64}'", row)]
    assert len(digests) == len(issued)  # what is kept: the SHA-256 of each


def test_a_database_of_schema_version_3_gains_the_tokens_table(database_url):
    storage = open_storage(database_url)
    with storage._transaction() as cursor:  # as version 3 left it: no tokens
        cursor.execute("DROP TABLE tokens")
        cursor.execute("UPDATE dpstream_schema SET version = 3")
    storage.close()
    storage = open_storage(database_url)
    try:
        assert storage.schema_version() == SCHEMA_VERSION
        store = TokenStore(storage)
        token, principal = store.create(token_spec({"role": "reader"}))
        assert store.find(token) == principal and store.find(token + "x") is None
    finally:
        storage.close()


def test_the_access_log_has_one_line_per_request_and_no_secret(tmp_path):
    out = io.StringIO()
    app = create_app(database=f"sqlite:///{tmp_path}/log.db", token=TOKEN, access_log=AccessLog(out))
    try:
        http = TestClient(app)
        http.post("/streams", json={"name": "s", **TOPS}, headers=ADMIN)
        http.post("/streams/s/values?secret=1", json={"values": [1.0]}, headers={"Authorization": "Bearer wrong"})
        http.get("/streams/s")
    finally:
        app.state.storage.close()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(line["method"], line["path"], line["status"], line["token"]) for line in lines] == [
        ("POST", "/streams", 201, "bootstrap"), ("POST", "/streams/s/values", 403, None),
        ("GET", "/streams/s", 200, None)]
    assert set(lines[0]) == {"time", "method", "path", "status", "seconds", "token", "client"}
    assert TOKEN not in out.getvalue() and "wrong" not in out.getvalue() and "secret" not in out.getvalue()


@pytest.mark.parametrize("args, code, message", [
    (["token", "create", "--role", "contributor"], 2, "a contributor token needs collector"),
    (["token", "create", "--role", "contributor", "--collector", "x", "--window", "1.5h"], 2, "window must be"),
    (["token", "revoke", "nope"], 1, "database dpstream.db: there is none (nothing was created;"),
    (["token", "list", "--database", "mysql://x"], 1, "database URL must start with sqlite:///"),
    (["token", "list", "--database", "sqlite:////nonexistent/x.db"], 1, "database /nonexistent/x.db: there is none"),
    (["token", "list", "--database", "sqlite:///x.db"], 1, "database x.db: there is none (nothing was created;"),
    (["budget", "b", "--database", "sqlite:///x.db"], 1, "database x.db: there is none (nothing was created;"),
    (["serve", "--token", TOKEN, "--access-log", "/nonexistent/dir/access.log"], 1, "--access-log /nonexistent/dir"),
], ids=["no collector", "bad window", "revoke without a database", "bad database", "list an absent database",
        "list an absent relative database", "budget of an absent database", "unwritable log"])
def test_bad_token_commands_are_one_line_errors(tmp_path, monkeypatch, args, code, message):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == code and message in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # a command that reads the database never creates it


def test_the_cli_lists_and_revokes_what_it_issued(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    issued = json.loads(runner.invoke(cli, ["token", "create", "--role", "producer", "--stream", "a",
                                            "--note", "meters"]).stdout.splitlines()[0])
    listed = json.loads(runner.invoke(cli, ["token", "list", "--json"]).stdout)["tokens"]
    assert listed == [{key: value for key, value in issued.items() if key != "token"}]
    assert runner.invoke(cli, ["token", "revoke", issued["id"]]).exit_code == 0
    unknown = runner.invoke(cli, ["token", "revoke", "nope"])
    assert unknown.exit_code == 1 and "no token with id 'nope'" in unknown.output
    table = runner.invoke(cli, ["token", "list"]).stdout
    assert issued["id"] in table and "revoked" in table and "stream:a" in table and issued["token"] not in table


def test_the_python_clients_issue_use_and_revoke_a_contributor_token(tmp_path):
    app = create_app(database=f"sqlite:///{tmp_path}/client.db", token=TOKEN)
    try:
        http = TestClient(app)
        admin = Client("http://testserver", TOKEN, http=http)
        admin.create_collector("fares", **COLLECTOR)
        issued = admin.create_token("contributor", collector="fares", rate=100, window="1m", max_batch=50)
        assert issued["token"].startswith("dpst_") and issued["scope"] == ["collector:fares"]
        app_client = ToPLClient("http://testserver", "fares", issued["token"], http=TestClient(app), bits=5)
        app_client.send(np.full(50, 20.0))
        with pytest.raises(ServiceError, match="at most 50 reports a batch, got 51") as refused:
            app_client.send(np.full(51, 20.0))
        assert refused.value.status == 413
        app_client.discard()
        assert [token["id"] for token in admin.tokens()] == [issued["id"]]
        assert admin.revoke_token(issued["id"])["revoked"] is not None
        with pytest.raises(ServiceError, match="was revoked") as revoked:
            app_client.send(np.full(10, 20.0))
        assert revoked.value.status == 403 and admin.collector("fares")["position"] == 50
    finally:
        app.state.storage.close()
