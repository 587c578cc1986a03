"""A durable release from Python, without the command line: start, checkpoint, finish, resume, replay check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpstream.durable import DurableRelease, ParameterError, ResumeError, StateMismatchError, StreamState
from dpstream.durable.keys import seed_key
from dpstream.durable.snapshots import keyless, with_key
from dpstream.release import BinaryTreeCounter, ToPS

VALUES = np.random.default_rng(8).integers(0, 50, 900).astype(float)
PARAMS = {"method": "tops", "epsilon": 1.0}


def build(key: bytes) -> ToPS:
    return ToPS(epsilon=1.0, upper_bound=50, hold=100, max_range=256, key=key)


def run(folder: Path, values: np.ndarray, *, params=PARAMS, make=build, chunk: int = 200) -> DurableRelease:
    """Release ``values`` durably into folder/out (checkpoint after each chunk); return the closed run."""
    release = DurableRelease.start(folder / "state", method="tops", params=params, seed=3, build=make,
                                   output=lambda resumed: folder / "out", checkpoint_seconds=0.0)
    try:
        with release.output() as sink:
            rest = np.fromiter(release.skip_consumed(values), dtype=np.float64)
            for start in range(0, rest.size, chunk):
                out = release.releaser.release(rest[start : start + chunk])
                sink.write("".join(f"{value!r}\n" for value in out.tolist()))
                release.checkpoint(sink)
            release.finish(sink)
    finally:
        release.close()
    return release


def test_an_interrupted_release_continues_as_one_uninterrupted_run(tmp_path):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    whole.mkdir(), parts.mkdir()
    run(whole, VALUES)
    first = run(parts, VALUES[:350])
    assert not first.resumed and first.saved.consumed == 350
    second = run(parts, VALUES)
    assert second.resumed and second.saved.consumed == VALUES.size
    expected = ToPS(epsilon=1.0, upper_bound=50, hold=100, max_range=256, key=seed_key(3)).release(VALUES)
    assert (parts / "out").read_text() == (whole / "out").read_text() == "".join(f"{v!r}\n" for v in expected.tolist())
    assert second.state.ledger[-1].first == 350 and second.state.ledger[-1].last == VALUES.size


def test_bytes_written_after_the_last_checkpoint_are_checked_when_released_again(tmp_path):
    run(tmp_path, VALUES[:400])
    with StreamState.open(tmp_path / "state") as state:  # a state of an older dpstream: it wrote, then committed
        state.commitment = None
        state.save()
    published = (tmp_path / "out").read_bytes()
    with open(tmp_path / "out", "ab") as out:  # a killed run wrote lines after its last checkpoint
        out.write(b"1.0\n")
    release = DurableRelease.start(tmp_path / "state", method="tops", params=PARAMS, seed=3, build=build,
                                   output=lambda resumed: tmp_path / "out")
    try:
        assert release.dropped == b"1.0\n"
        with pytest.raises(ResumeError, match="the input differs"):
            with release.output() as sink:
                sink.write(f"{release.releaser.release(VALUES[400:401])[0]!r}\n")
    finally:
        release.close()
    assert (tmp_path / "out").read_bytes() == published + b"1.0\n"  # left as it was


def test_parameters_that_do_not_fit_are_library_errors(tmp_path):
    with pytest.raises(ParameterError, match="epsilon"):
        run(tmp_path, VALUES, make=lambda key: ToPS(epsilon=-1.0, upper_bound=50, key=key))
    assert not (tmp_path / "state").exists()
    run(tmp_path, VALUES[:300])
    with pytest.raises(StateMismatchError, match="epsilon = 1.0; this command has epsilon = 2.0"):
        run(tmp_path, VALUES, params={"method": "tops", "epsilon": 2.0})
    (tmp_path / "out").write_text("")
    with pytest.raises(ResumeError, match="fewer than the"):
        run(tmp_path, VALUES)


def test_a_stored_snapshot_keeps_no_key_and_gets_it_back():
    counter = BinaryTreeCounter(epsilon=1.0, upper_bound=50, max_range=64, key=bytes(range(32)))
    counter.release(VALUES[:40])
    stored = keyless(counter.state)
    assert "key" not in stored["noise"] and bytes(range(32)) not in repr(stored).encode()
    twin = BinaryTreeCounter.from_state(with_key(stored, bytes(range(32))))
    np.testing.assert_array_equal(twin.release(VALUES[40:200]), counter.release(VALUES[40:200]))
