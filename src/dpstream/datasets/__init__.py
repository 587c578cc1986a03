"""Built-in datasets and loading of user streams for experiments.

``pos`` is the POS stream of the ToPS paper (Table 1): 515,597 transaction sizes, shipped with
the package (see ``README.md`` in this folder for its origin).  ``smart-meter``, ``taxi-fares``
and ``bursty-counts`` are the synthetic streams of :mod:`dpstream.datasets.synthetic`, generated
on loading (seed 0, 2,000,000 values unless ``length`` says otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from dpstream._checks import check_bound, check_stream_values
from dpstream.datasets.synthetic import SYNTHETIC
from dpstream.io import read_values

__all__ = ["BUILTIN", "Dataset", "load_dataset", "names"]


@dataclass(frozen=True, kw_only=True)
class Dataset:
    """A stream with its public upper bound B."""

    name: str
    values: np.ndarray
    upper_bound: float
    description: str


#: Built-in datasets: name -> (file in this package, B from the ToPS paper's Table 1, description).
BUILTIN: dict[str, tuple[str, float, str]] = {
    "pos": ("pos.csv.gz", 1657.0, "POS: sizes of 515,597 merchant transactions (ToPS paper, Table 1)"),
}


def names() -> tuple[str, ...]:
    """Every name :func:`load_dataset` knows: the shipped datasets, then the synthetic streams.

    >>> names()
    ('pos', 'smart-meter', 'taxi-fares', 'bursty-counts')
    """
    return (*BUILTIN, *SYNTHETIC)


def load_dataset(
    name_or_path: str | Path, *, upper_bound: float | None = None, column: str | None = None, clip: bool = False,
    length: int | None = None,
) -> Dataset:
    """Load a built-in dataset by name (:func:`names`), or a stream file by path.

    A synthetic stream (``smart-meter``, ``taxi-fares``, ``bursty-counts``) is generated with
    seed 0: ``length`` values (default 2,000,000; the same length gives the same values), with
    the public bound of its physics (:data:`~dpstream.datasets.synthetic.SYNTHETIC`).  ``length``
    applies to these only.  For a file without ``upper_bound`` the bound is the data's maximum: fine for experiments,
    but a bound read off the data is not private, so a release needs a public B.  A value
    outside [0, B] is an error naming its position, or, with ``clip=True``, clipped into it.

    >>> pos = load_dataset("pos")
    >>> pos.values.size, pos.upper_bound
    (515597, 1657.0)
    >>> meter = load_dataset("smart-meter", length=1440)
    >>> meter.values.size, meter.upper_bound
    (1440, 10000.0)
    """
    key = str(name_or_path)
    if length is not None and key not in SYNTHETIC:
        raise ValueError(f"length applies to the synthetic streams ({', '.join(SYNTHETIC)}), got it for {key!r}.")
    if key in BUILTIN or key in SYNTHETIC:
        if key in SYNTHETIC:
            generator, bound, description = SYNTHETIC[key]
            values = generator() if length is None else generator(length, seed=0)
        else:
            filename, bound, description = BUILTIN[key]
            with resources.as_file(resources.files(__name__) / filename) as path:
                values = read_values(path)
        if upper_bound is None:
            return Dataset(name=key, values=values, upper_bound=bound, description=description)
        bound = check_bound(upper_bound, "upper bound")
        values = check_stream_values(values, bound, clip=clip)
        return Dataset(name=key, values=values, upper_bound=bound, description=description)
    path = Path(key)
    if not path.exists():
        raise ValueError(
            f"dataset must be a built-in name ({', '.join(names())}) or an existing file, got {key!r}."
        )
    values = read_values(path, column=column)
    if values.size == 0:
        raise ValueError(f"dataset file {key!r} holds no values.")
    if upper_bound is None and not values.max() > 0:
        raise ValueError(f"dataset file {key!r} has no positive value to take as its bound; give the upper bound.")
    bound = float(values.max()) if upper_bound is None else check_bound(upper_bound, "upper bound")
    values = check_stream_values(values, bound, clip=clip)
    return Dataset(name=path.stem, values=values, upper_bound=bound, description=f"stream read from {key}")
