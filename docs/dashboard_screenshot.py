"""Make docs/results/dashboard.png: the dashboard of ``dpstream serve`` fed with the built-in POS stream.

Starts ``dpstream serve`` on a free port of 127.0.0.1 with a temporary SQLite database, creates a
ToPS and a PAK stream and a ToPL collector, feeds each the first values of POS (the streams in
batches of 1,000, the collector through the Python client, which randomizes every value locally),
and photographs the page in Debian's headless Chromium (``/usr/bin/chromium``) through Playwright::

    python docs/dashboard_screenshot.py [--out docs/results/dashboard.png] [--values 30000]

No seed: the noise comes from the OS, so every run draws a different picture.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from dpstream.client import Client, ToPLClient
from dpstream.datasets import load_dataset

CHROMIUM = "/usr/bin/chromium"
BATCH = 1_000


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serve(database: Path, token: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "dpstream.cli", "serve", "--database", f"sqlite:///{database}", "--port", str(port),
         "--log-level", "warning"], env=dict(os.environ, DPSTREAM_TOKEN=token), stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("dpstream serve did not answer /health within 60 s.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "dashboard.png")
    parser.add_argument("--values", type=int, default=30_000, help="POS values fed to each stream and collector")
    args = parser.parse_args()
    pos = load_dataset("pos")
    values = pos.values[: args.values]
    hold = args.values // 3
    token = secrets.token_urlsafe()
    with tempfile.TemporaryDirectory() as directory:
        process, url = _serve(Path(directory) / "dashboard.db", token)
        try:
            with Client(url, token) as client:
                client.create_stream("pos-tops", method="tops", epsilon=1.0, upper_bound=pos.upper_bound, hold=hold)
                client.create_stream("pos-pak", method="pak", epsilon=1.0, upper_bound=pos.upper_bound, hold=hold)
                client.create_collector("pos-topl", epsilon=1.0, upper_bound=pos.upper_bound, hold=hold)
                start = time.time() - values.size  # one value a second, ending now
                for first in range(0, values.size, BATCH):
                    batch = values[first:first + BATCH]
                    times = [start + first + i for i in range(batch.size)]
                    for name in ("pos-tops", "pos-pak"):
                        client.send(name, batch, times=times, first_position=first)
            reports = ToPLClient(url, "pos-topl", token)
            try:
                reports.send(values)
            finally:
                reports.close()
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1240, "height": 900}, device_scale_factor=1)
                page.goto(url + "/")
                page.select_option("#window", "1000")
                for name in ("pos-tops", "pos-pak", "pos-topl"):
                    page.wait_for_selector(f'section[data-name="{name}"] .live.on', timeout=30_000)
                page.wait_for_timeout(500)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(args.out), full_page=True)
                browser.close()
        finally:
            process.terminate()
            process.wait(timeout=10)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
