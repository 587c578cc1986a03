"""Files written by an earlier release of dpstream keep being read, and continue exactly.

``tests/data/stored`` holds what dpstream 0.x wrote before mechanisms had one name each:
``release --state`` files (their snapshots name the binary tree ``"binary-tree"``, the command
``"bt"``) with the output each had written after the first 180 values of ``input.txt``, and a
SQLite service database (``service.db``) whose streams ``tops``, ``bt`` and ``pak`` (seed 7)
have consumed the same 180 values.  Continuing each with the rest of the input must release
exactly what one uninterrupted run of today's code releases.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from dpstream.cli import cli
from dpstream.durable.format import dump_state, parse_state
from dpstream.release import PAK, BinaryTreeCounter, ToPS
from dpstream.service import create_app
from dpstream.service.mechanisms import derive_key

STORED = Path(__file__).parent / "data" / "stored"
#: The options the stored states were made with (``release INPUT --method M ... --seed 5 --state``).
OPTIONS = {
    "tops": ["--hold", "50"],
    "pak": ["--hold", "50"],
    "bt": [],
    "topl": ["--hold", "50"],
}
COMMON = ["--epsilon", "1", "--upper-bound", "40", "--max-range", "64", "--seed", "5"]
TOKEN = "fixture-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _moved(state: Path, output: Path) -> None:
    """Point a copied state at its copied output (a state records its output's absolute path)."""
    body = parse_state(state.read_bytes(), state)
    body["params"]["output"] = str(output.resolve())
    state.write_bytes(dump_state(body))
    state.chmod(0o600)


def _release(method: str, input_path: Path, output: Path, state: Path) -> None:
    result = CliRunner().invoke(cli, ["release", str(input_path), "-o", str(output), "--method", method, *COMMON,
                                      *OPTIONS[method], "--state", str(state)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("method", list(OPTIONS))
def test_a_stored_state_file_continues_as_one_uninterrupted_run(tmp_path, method):
    shutil.copy(STORED / "input.txt", tmp_path / "input.txt")
    shutil.copy(STORED / f"{method}.out", tmp_path / "resumed.out")
    shutil.copy(STORED / f"{method}.state", tmp_path / "resumed.state")
    _moved(tmp_path / "resumed.state", tmp_path / "resumed.out")
    before = (tmp_path / "resumed.out").read_bytes()
    _release(method, tmp_path / "input.txt", tmp_path / "resumed.out", tmp_path / "resumed.state")
    _release(method, tmp_path / "input.txt", tmp_path / "whole.out", tmp_path / "whole.state")
    resumed, whole = (tmp_path / "resumed.out").read_bytes(), (tmp_path / "whole.out").read_bytes()
    assert resumed.startswith(before) and len(resumed) > len(before)
    assert resumed == whole


def test_a_stored_service_database_continues_its_streams(tmp_path):
    shutil.copy(STORED / "service.db", tmp_path / "service.db")
    (tmp_path / "service.db").chmod(0o600)  # a checkout gives the file the umask's mode; the service wants 0600
    values = np.loadtxt(STORED / "input.txt")
    app = create_app(database=f"sqlite:///{tmp_path}/service.db", token=TOKEN)
    try:
        http = TestClient(app)
        classes = {"tops": ToPS, "bt": BinaryTreeCounter, "pak": PAK}
        for name, cls in classes.items():
            facts = http.get(f"/streams/{name}").json()
            assert facts["position"] == 180 and facts["method"] == name
            answer = http.post(f"/streams/{name}/values", json={"values": values[180:].tolist(), "first_position": 180},
                               headers=AUTH)
            assert answer.status_code == 200, answer.text
            stored = http.get(f"/streams/{name}/released?limit=1000").json()
            params = {"epsilon": 1.0, "upper_bound": 40.0, "max_range": 64, **({} if name == "bt" else {"hold": 50})}
            expected = cls(**params, key=derive_key(7)).release(values)
            got = [row["value"] for row in (stored["released"] if isinstance(stored, dict) else stored)]
            assert got == expected.tolist()
    finally:
        app.state.storage.close()


def test_the_service_stores_a_streams_key_once_and_reads_states_that_carried_it():
    import json

    from dpstream.durable.encoding import encode
    from dpstream.service.mechanisms import KEYLESS_FORMAT, STATE_FORMAT, restore, snapshot

    key = derive_key(3)
    values = np.loadtxt(STORED / "input.txt")
    stream = ToPS(epsilon=1.0, upper_bound=40.0, hold=50, max_range=64, key=key)
    stream.release(values[:120])
    text = snapshot(stream)
    assert json.loads(text)["format"] == KEYLESS_FORMAT
    key_text = encode(key, "key")["$bytes"]
    assert key_text not in text  # the key is not in the stored state
    with pytest.raises(ValueError, match="needs the stream's key"):
        restore(ToPS, text)
    older = json.dumps({"format": STATE_FORMAT, "state": encode(stream.state, "state")})
    assert key_text in older  # as earlier releases stored it
    whole = ToPS(epsilon=1.0, upper_bound=40.0, hold=50, max_range=64, key=key).release(values)
    for stored, given in ((text, key), (older, None), (older, key)):
        resumed = restore(ToPS, stored, key=given).release(values[120:])
        assert np.array_equal(resumed, whole[120 - 50:])
