"""The dashboard's page as served, before any script runs: each source's name and its guarantee in words."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import pytest
from fastapi.testclient import TestClient

from dpstream.accounting import rho_for
from dpstream.service import create_app
from dpstream.service.dashboard import STATIC, guarantee_in_words

TOKEN = "page-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NODE = shutil.which("node")


@pytest.fixture
def http(tmp_path):
    application = create_app(database=f"sqlite:///{tmp_path}/page.db", token=TOKEN)
    yield TestClient(application)
    application.state.storage.close()


def test_an_empty_service_says_so_without_a_script(http):
    page = http.get("/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert "Content-Security-Policy" in page.headers
    assert "None yet: create one with POST /streams (needs the token)." in page.text
    assert "None yet: create one with POST /collectors (needs the token)." in page.text
    assert "<!--" not in page.text.split("<main>")[1]  # every slot filled


def test_the_served_page_holds_each_stream_and_its_guarantee(http):
    assert http.post("/streams", json={"name": "meters", "epsilon": 1.0, "upper_bound": 100.0}, headers=AUTH).is_success
    assert http.post("/streams", json={"name": "tiny", "epsilon": 0.5, "upper_bound": 10.0}, headers=AUTH).is_success
    assert http.post("/streams/meters/values", json={"values": [1.0, 2.0, 3.0]}, headers=AUTH).is_success
    page = http.get("/").text
    words = "each value is protected at ε = 1 (event level); the stream's guarantee is ε = 1 however long it runs"
    assert words in page and "budget spent" not in page
    assert "each value is protected at ε = 0.5 (event level)" in page
    assert '<section class="source" data-kind="stream" data-name="meters" data-server="">' in page
    for facts in http.get("/streams").json()["streams"]:
        assert html.escape(guarantee_in_words("stream", facts), quote=False) in page
        assert html.escape(facts["privacy"], quote=False) in page  # the exact statement the API answers with


def test_a_collector_s_guarantee_is_local(http):
    created = http.post("/collectors", json={"name": "app", "epsilon": 2.0, "upper_bound": 1.0}, headers=AUTH)
    assert created.is_success, created.text
    page = http.get("/").text
    assert ("each client's report is protected at ε = 2 (local, randomized by the client); "
            "the collector's guarantee is ε = 2 however many reports arrive") in page


@pytest.mark.parametrize(("budget", "level"), [({"epsilon": 0.25, "delta": 1e-6}, "ε = 0.25, δ = 1e-6"),
                                               ({"epsilon": 2500.0, "delta": 0.0}, "ε = 2,500")])
def test_the_words_name_epsilon_and_delta_as_the_page_writes_numbers(budget, level):
    words = guarantee_in_words("stream", {"budget": budget, "privacy": "x-DP; neighbours: user level: ...; ..."})
    assert words == (f"each value is protected at {level} (user level); "
                     f"the stream's guarantee is {level} however long it runs")


def test_an_aggregate_s_card_says_its_unit_level_guarantee_and_not_the_rows_it_consumed(http):
    assert "None yet: create one with POST /aggregates (needs the token)." in http.get("/").text
    created = http.post("/aggregates", headers=AUTH, json={
        "name": "load", "epsilon": 1.0, "bucket": "30m", "unit_window": "1d", "unit_bound": 30.0, "unit": "meter"})
    assert created.status_code == 201, created.text
    rows = {"times": [1_704_067_200 + 60 * i for i in range(100)], "units": [f"m{i % 7}" for i in range(100)],
            "values": [1.0] * 100, "first_position": 0}
    assert http.post("/aggregates/load/rows", json=rows, headers=AUTH).is_success
    facts = http.get("/aggregates/load").json()
    page = http.get("/").text
    card = page.split('<section class="source" data-kind="aggregate" data-name="load" data-server="">')[1]
    card = card.split("</section>")[0]
    assert guarantee_in_words("aggregate", facts) == facts["guarantee"] == (
        "each meter's readings in each UTC day: ε = 1; over 1 day: ε = 1 by composition")
    assert f'<dd data-fact="guarantee">{facts["guarantee"]}</dd>' in card
    assert f'<dd data-fact="released">{facts["released"]}</dd>' in card and facts["released"] == 3
    assert html.escape(facts["privacy"], quote=False) in card
    assert 'data-fact="position"' not in card and "received" not in card  # the rows consumed are data
    assert not re.search(r"(?<![\d.,])100(?![\d.,])", card), card


def _script_words(kind, facts):
    """What the page's script (``guaranteeInWords`` of static/dashboard.js, with its ``number``) says, run by node."""
    script = (STATIC / "dashboard.js").read_text(encoding="utf-8")
    functions = [re.search(rf"\n  function {name}\(.*?\n  }}\n", script, re.S).group(0)
                 for name in ("number", "guaranteeInWords")]
    program = "".join(functions) + f"console.log(JSON.stringify(guaranteeInWords({json.dumps(kind)}, " \
                                   f"{json.dumps(facts)})));"
    return json.loads(subprocess.run([NODE, "-e", program], capture_output=True, text=True, check=True).stdout)


def test_a_zcdp_stream_s_card_states_rho_and_the_epsilon_delta_it_implies(http):
    created = http.post("/streams", headers=AUTH, json={"name": "z", "method": "sqrt-zcdp", "epsilon": 1.0,
                                                        "delta": 1e-5, "upper_bound": 10.0, "max_range": 64})
    assert created.status_code == 201, created.text
    assert http.post("/streams", json={"name": "plain", "method": "bt", "epsilon": 1.0, "upper_bound": 10.0},
                     headers=AUTH).is_success
    facts = http.get("/streams/z").json()
    rho = rho_for(1.0, 1e-5)
    words = (f"each value is protected at ρ = {float(f'{rho:.4g}'):g} (zCDP), which implies (ε, δ) = (1, 1e-5) "
             "(event level); the stream's guarantee is ρ = 0.03056 however long it runs")
    assert guarantee_in_words("stream", facts) == words and f"{rho:.4g}" == "0.03056"
    card = http.get("/").text.split('data-kind="stream" data-name="z" data-server="">')[1].split("</section>")[0]
    assert f'<dd data-fact="guarantee">{words}</dd>' in card
    if NODE is None:
        pytest.skip("node is not installed: the script's words are checked by the browser tests only")
    assert _script_words("stream", facts) == words  # the script writes the same words
    plain = http.get("/streams/plain").json()
    assert _script_words("stream", plain) == guarantee_in_words("stream", plain) == (
        "each value is protected at ε = 1 (event level); the stream's guarantee is ε = 1 however long it runs")


def test_a_gaussian_aggregate_s_card_states_rho_per_window(http):
    created = http.post("/aggregates", headers=AUTH, json={
        "name": "g", "epsilon": 1.0, "bucket": "1h", "unit_window": "1d", "unit_bound": 5.0, "unit": "meter",
        "noise": "gaussian", "delta": 1e-6})
    assert created.status_code == 201, created.text
    facts = http.get("/aggregates/g").json()
    rho = rho_for(1.0, 1e-6)
    assert facts["guarantee"] == (f"each meter's readings in each UTC day: ρ = {rho:g} (ε = 1, δ = 1e-06); over 0 "
                                  "windows: ρ = 0 by composition (ε = 0, δ = 1e-06)")
    assert f'<dd data-fact="guarantee">{facts["guarantee"]}</dd>' in http.get("/").text
