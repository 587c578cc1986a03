"""Cross-origin requests to ``dpstream serve`` (``--cors-origin``): preflights answered for exactly the given
origins, nothing at all without the option, and a bad origin refused in one line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from dpstream.cli import cli as main
from dpstream.service import create_app

TOKEN = "cors-test-token-0123456789"
ALLOWED = "https://app.example.org"
PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}


@pytest.fixture
def app(tmp_path):
    application = create_app(database=f"sqlite:///{tmp_path}/cors.db", token=TOKEN,
                             cors_origins=[ALLOWED, "http://127.0.0.1:8080"])
    yield application
    application.state.storage.close()


def test_a_preflight_from_an_allowed_origin_is_answered(app):
    answer = TestClient(app).options("/streams/a/values", headers={"Origin": ALLOWED, **PREFLIGHT})
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == ALLOWED  # the origin itself, never *
    assert "POST" in answer.headers["access-control-allow-methods"]
    allowed = {header.strip().lower() for header in answer.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type"} <= allowed
    assert "access-control-allow-credentials" not in answer.headers


def test_an_allowed_origin_reads_the_answer_of_a_simple_request(app):
    answer = TestClient(app).get("/streams", headers={"Origin": "http://127.0.0.1:8080"})
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == "http://127.0.0.1:8080"


def test_another_origin_is_not_allowed(app):
    http = TestClient(app)
    preflight = http.options("/streams", headers={"Origin": "https://evil.example.org", **PREFLIGHT})
    assert preflight.status_code == 400 and "access-control-allow-origin" not in preflight.headers
    read = http.get("/streams", headers={"Origin": "https://evil.example.org"})
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers


def test_without_the_option_there_is_no_cors_header(tmp_path):
    application = create_app(database=f"sqlite:///{tmp_path}/plain.db", token=TOKEN)
    http = TestClient(application)
    preflight = http.options("/streams", headers={"Origin": ALLOWED, **PREFLIGHT})
    read = http.get("/streams", headers={"Origin": ALLOWED})
    application.state.storage.close()
    assert preflight.status_code == 405
    assert not [name for name in [*preflight.headers, *read.headers] if name.startswith("access-control-")]


@pytest.mark.parametrize("origin", ["*", "app.example.org", "https://app.example.org/", "ftp://app.example.org",
                                    "https://app.example.org:99999", "https://app.example.org/page", ""])
def test_a_bad_origin_is_a_one_line_usage_error(tmp_path, origin):
    database = tmp_path / "never.db"
    result = CliRunner().invoke(main, ["serve", "--database", f"sqlite:///{database}", "--token", TOKEN,
                                       "--cors-origin", ALLOWED, "--cors-origin", origin])
    assert result.exit_code == 2
    error = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert error == [f"Error: --cors-origin {origin!r} is not an origin: scheme://host[:port] "
                     "(e.g. https://app.example.org), nothing after the port."]
    assert not database.exists()  # refused before anything is opened


def test_a_bad_origin_is_refused_by_create_app(tmp_path):
    with pytest.raises(ValueError, match="'https://a.example.org/x' is not an origin"):
        create_app(database=f"sqlite:///{tmp_path}/never.db", token=TOKEN, cors_origins=["https://a.example.org/x"])
