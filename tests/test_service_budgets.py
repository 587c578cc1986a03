"""The service's budget stores: created by an admin, charged when a source is created against one (refused past
the total, about one subject, once per source, taken back when the source is not created), read by anyone, from
the Python client too; schema version 5 from 4 on SQLite and PostgreSQL; concurrent charges."""

from __future__ import annotations

import threading

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from dpstream.accounting import rho_of_pure, zcdp_epsilon
from dpstream.cli import cli
from dpstream.client import Client, ServiceError
from dpstream.durable.budget_store import BudgetExhausted
from dpstream.privacy import EVENT_LEVEL, PrivacyGuarantee
from dpstream.service import create_app, open_storage
from dpstream.service.budgets import ServiceBudgets
from dpstream.service.storage import SCHEMA_VERSION

TOKEN = "budgets-test-token-0123456789"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
AGGREGATE = {"epsilon": 0.2, "bucket": "1h", "unit_window": "1d", "unit_bound": 5, "upper_bound": 5.0, "seed": 3}
STREAM = {"method": "bt", "epsilon": 0.5, "upper_bound": 5.0, "seed": 1}


@pytest.fixture
def http(tmp_path):
    app = create_app(database=f"sqlite:///{tmp_path}/budgets.db", token=TOKEN)
    yield TestClient(app)
    app.state.storage.close()


def test_sources_are_charged_at_creation_and_refused_past_the_total(http):
    assert http.post("/budgets", json={"name": "households", "rho": 0.05}, headers=ADMIN).status_code == 201
    made = [http.post("/aggregates", json={"name": f"day{i}", **AGGREGATE, "budget": "households"}, headers=ADMIN)
            for i in range(3)]
    assert [answer.status_code for answer in made] == [201, 201, 409]  # 0.02 + 0.02, and 0.02 more would pass 0.05
    assert "needs rho 0.02 but the budget store has 0.01 left of 0.05" in made[2].json()["message"]
    assert http.get("/aggregates/day2").status_code == 404  # refused: nothing created
    assert made[0].json()["parameters"]["budget"] == "households"
    shown = http.get("/budgets/households").json()  # a public read
    assert shown["spent"]["rho"] == pytest.approx(2 * rho_of_pure(0.2))
    assert shown["left"]["rho"] == pytest.approx(0.05 - 2 * rho_of_pure(0.2))
    assert shown["left"]["epsilon"] == zcdp_epsilon(shown["left"]["rho"], 1e-6) and shown["left"]["delta"] == 1e-6
    assert shown["subject"] == "unit level: each unit in each UTC day (added or removed)"
    assert [charge["release"] for charge in shown["charges"]] == ["aggregate day0", "aggregate day1"]
    other = http.post("/streams", json={"name": "s", **STREAM, "budget": "households"}, headers=ADMIN)
    assert other.status_code == 422 and "is about unit level" in other.json()["message"]
    assert http.get("/budgets").json() == {"budgets": ["households"]}


def test_a_source_is_charged_once_and_a_creation_that_fails_takes_its_charge_back(http):
    assert http.post("/budgets", json={"name": "p", "epsilon": 2.0}, headers=ADMIN).status_code == 201
    assert http.post("/streams", json={"name": "s", **STREAM, "budget": "p"}, headers=ADMIN).status_code == 201
    again = http.post("/streams", json={"name": "s", **STREAM, "budget": "p"}, headers=ADMIN)
    assert again.status_code == 409 and "charged to budget 'p' already" in again.json()["message"]
    assert http.post("/streams", json={"name": "plain", **STREAM}, headers=ADMIN).status_code == 201
    taken = http.post("/streams", json={"name": "plain", **STREAM, "budget": "p"}, headers=ADMIN)
    assert taken.status_code == 409 and "exists already" in taken.json()["message"]
    shown = http.get("/budgets/p").json()
    assert shown["spent"] == {"epsilon": 0.5} and [c["release"] for c in shown["charges"]] == ["stream s"]
    collector = {"epsilon": 1.0, "upper_bound": 100.0, "hold": 500, "max_range": 4096, "buckets": 64}
    local = http.post("/collectors", json={"name": "c", **collector, "budget": "p"}, headers=ADMIN)
    assert local.status_code == 422 and "is about EVENT_LEVEL" in local.json()["message"]
    pak = http.post("/streams", json={"name": "z", "method": "pak", "epsilon": 0.1, "upper_bound": 5.0, "hold": 100,
                                      "max_range": 1024, "budget": "p"}, headers=ADMIN)
    assert pak.status_code == 422 and "pure and zCDP releases only" in pak.json()["message"]
    assert http.get("/budgets/p").json()["spent"] == {"epsilon": 0.5}


@pytest.mark.parametrize(("document", "message"), [
    ({"name": "x"}, "rho (zCDP) or epsilon (pure DP), one of them"),
    ({"name": "x", "rho": -1}, "finite number > 0, got -1"),
    ({"name": "x", "rho": 1, "delta": 2}, "delta must be below 1"),
    ({"name": "x", "rho": 1e308}, "a budget's rho 1e+308 implies an epsilon beyond a float at delta 1e-06"),  # was 500
    ({"name": "x", "epsilon": 1, "delta": 1e-6}, "delta applies to a rho budget"),
    ({"name": "x", "rho": 1, "total": 2}, "unknown field(s) total"),
    ({"rho": 1}, "name must be"),
])
def test_bad_budgets_are_one_line_422s(http, document, message):
    answer = http.post("/budgets", json=document, headers=ADMIN)
    assert answer.status_code == 422 and message in answer.json()["message"]
    assert "\n" not in answer.json()["message"]
    assert http.post("/streams", json={"name": "s", **STREAM, "budget": 3}, headers=ADMIN).status_code == 422
    assert http.get("/budgets/x").status_code == 404


def test_the_python_client_creates_and_reads_budgets(tmp_path):
    app = create_app(database=f"sqlite:///{tmp_path}/client.db", token=TOKEN)
    try:
        admin = Client("http://testserver", TOKEN, http=TestClient(app))
        assert admin.create_budget("b", epsilon=1.0)["left"] == {"epsilon": 1.0}
        admin.create_stream("s", budget="b", **STREAM)
        assert admin.budgets() == ["b"] and admin.budget("b")["left"] == {"epsilon": 0.5}
        with pytest.raises(ServiceError, match="needs epsilon 0.6 but the budget store has 0.5 left") as refused:
            admin.create_stream("t", budget="b", **{**STREAM, "epsilon": 0.6})
        assert refused.value.status == 409
    finally:
        app.state.storage.close()


def _pure(epsilon: float) -> PrivacyGuarantee:
    return PrivacyGuarantee(epsilon=epsilon, delta=0.0, neighbours=EVENT_LEVEL, composition="r")


def test_a_database_of_schema_version_4_gains_the_budget_tables_and_charges_queue(database_url):
    storage = open_storage(database_url)
    with storage._transaction() as cursor:  # as version 4 left it: no budgets
        cursor.execute("DROP TABLE budget_charges")
        cursor.execute("DROP TABLE budgets")
        cursor.execute("UPDATE dpstream_schema SET version = 4")
    storage.close()
    storages = [open_storage(database_url) for _ in range(4)]  # as processes serving one database
    try:
        assert storages[0].schema_version() == SCHEMA_VERSION == 5
        ServiceBudgets(storages[0]).create("b", "pure", 1.0, 1e-6)
        results: list[str] = []

        def charge(i: int) -> None:
            try:
                ServiceBudgets(storages[i % 4]).charge("b", f"stream s{i}", _pure(0.1))
                results.append("ok")
            except BudgetExhausted:
                results.append("refused")

        threads = [threading.Thread(target=charge, args=(i,)) for i in range(14)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results) == ["ok"] * 10 + ["refused"] * 4
        shown = ServiceBudgets(storages[1]).describe("b")
        assert len(shown["charges"]) == 10 and shown["spent"]["epsilon"] == pytest.approx(1.0)
    finally:
        for storage in storages:
            storage.close()


def test_dpstream_budget_reads_a_budget_of_the_database(tmp_path):
    database = f"sqlite:///{tmp_path}/cli.db"
    app = create_app(database=database, token=TOKEN)
    try:
        http = TestClient(app)
        http.post("/budgets", json={"name": "b", "rho": 1.0}, headers=ADMIN)
        assert http.post("/streams", json={"name": "s", **STREAM, "budget": "b"}, headers=ADMIN).status_code == 201
    finally:
        app.state.storage.close()
    shown = CliRunner().invoke(cli, ["budget", "b", "--database", database])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0].startswith(f"budget 'b' of {database}: zCDP, total rho 1 (epsilon ")
    assert lines[0].endswith("about EVENT_LEVEL")
    assert lines[1].startswith(f"spent rho {rho_of_pure(0.5):g} (epsilon ") and lines[2].endswith("rho 0.125  stream s")
    missing = CliRunner().invoke(cli, ["budget", "nope", "--database", database])
    assert missing.exit_code == 1 and missing.output == "Error: there is no budget named 'nope'.\n"
    mixed = CliRunner().invoke(cli, ["budget", "b", "--database", database, "--new-rho", "1"])
    assert mixed.exit_code == 2 and "--new-rho, --new-epsilon and --summary do not apply" in mixed.output
