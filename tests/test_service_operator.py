"""What operators expect of ``dpstream serve``: the API's page ``/docs`` served whole by the service itself."""

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
