"""The release of Section 4 of Cao et al.: the location-count vector of every time step with
discrete Laplace noise (the integer counterpart of Theorem 3.1's Laplace noise)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dpstream._checks import check_bound, check_epsilon, check_positive_int
from dpstream._params import Params
from dpstream.noise.bits import BitsSeed
from dpstream.noise.discrete_laplace_law import discrete_laplace_scale
from dpstream.noise.sampler import ExactNoise, FloatNoise, NoiseSampler, exact_noise
from dpstream.privacy import USER_STEP, EpsilonDelta, Part, PrivacyGuarantee

__all__ = ["COUNT_SENSITIVITY", "LaplaceCounts", "laplace_scale"]

#: L1 sensitivity of one step's count vector when a neighbour moves one user to another location.
COUNT_SENSITIVITY = 2.0


def laplace_scale(epsilon: float, sensitivity: float = COUNT_SENSITIVITY) -> float:
    """Scale ``lambda`` of the per-step noise: ``Delta / epsilon`` rounded **up** to a multiple of
    ``2^-20`` (:func:`~dpstream.noise.discrete_laplace_law.discrete_laplace_scale`), the scale
    :class:`LaplaceCounts` draws with; ``Delta = sensitivity``, by default 2 (one user moves; 1
    for add/remove-one-user neighbours).  The float is exact (at most 40 significant bits).

    >>> laplace_scale(0.5), laplace_scale(0.5, sensitivity=1)
    (4.0, 2.0)
    >>> laplace_scale(0.3) >= 2 / 0.3, laplace_scale(0.3) - 2 / 0.3 < 2**-20
    (True, True)
    """
    return float(discrete_laplace_scale(check_bound(sensitivity, "sensitivity"), check_epsilon(epsilon)))


def _noise_name(noise: NoiseSampler) -> str:
    if isinstance(noise, ExactNoise):
        return "exact discrete Laplace noise"
    if isinstance(noise, FloatNoise):
        return "double-geometric noise from numpy's float sampler (not exact: not for publication)"
    return f"noise from {type(noise).__name__}"


class LaplaceCounts(Params):
    """Add discrete Laplace noise of scale ``sensitivity / epsilon`` (rounded up) to every cell of
    a ``T x m`` integer count stream.

    Parameters
    ----------
    epsilon : float
        Budget of each time step's release.
    sensitivity : int
        L1 sensitivity of one step's count vector: 2 (default) when a neighbour moves one user,
        1 for add/remove-one-user neighbours.
    seed : None, int, numpy Generator or bit source
        Where the noise's random bits come from (:func:`~dpstream.noise.bits.make_bits`): None
        (default) reads the operating system's CSPRNG, an int replays a seeded PCG64 (tests;
        never publish a seeded release), a Generator is used as a bit source (studies).
    noise : NoiseSampler, optional
        Instead of ``seed``: the sampler itself (``ZeroNoise()`` for tests, ``FloatNoise`` for a
        study that must be fast; neither is for publication).

    Attributes
    ----------
    noise_scale : Fraction
        The exact scale ``b`` of the noise, ``sensitivity / epsilon`` rounded up to a multiple of
        ``2^-20``; ``scale`` is the same number as a float.
    granularity : int
        1: the released counts are integers.

    Privacy
    -------
    epsilon-DP per time step.  The database is bounded (Section 4: ``n`` users, ``n`` public);
    neighbouring databases differ in the location of one user at one time step, which moves
    one unit of count from one location to another, so the count vector changes by 1 in two
    cells: L1 sensitivity ``Delta = 2``.  (The paper writes ``Lap(Delta / epsilon)`` without
    fixing ``Delta``; 2 is what its bounded-database neighbour requires.)  The noise is exact
    discrete Laplace, ``P[X = x]`` proportional to ``exp(-|x| / b)`` on the integers, drawn from
    random bits by :class:`~dpstream.noise.sampler.ExactNoise`, with ``b >= Delta / epsilon``: the
    ratio of the probabilities of any released vector under neighbours is at most
    ``exp(Delta / b) <= exp(epsilon)``, for the numbers the computer produces.  Over ``T``
    steps the releases compose sequentially: a user's whole trajectory is protected at
    ``T epsilon``.  Post-processing (:mod:`dpstream.postprocess.estimators`) uses only the
    released counts and public knowledge, so it costs nothing more.

    >>> noisy = LaplaceCounts(epsilon=1.0, seed=0).release(np.array([[3, 2], [1, 4]]))
    >>> noisy.shape, noisy.dtype
    ((2, 2), dtype('int64'))
    """

    granularity = 1
    #: The noise law of the release, the likelihood post-processing assumes by default: the
    #: two-sided geometric law of scale ``noise_scale``.
    likelihood = "discrete_laplace"

    def __init__(
        self,
        *,
        epsilon: float,
        sensitivity: int = int(COUNT_SENSITIVITY),
        seed: BitsSeed = None,
        noise: NoiseSampler | None = None,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.sensitivity = check_positive_int(sensitivity, "sensitivity")
        self.noise_scale: Fraction = discrete_laplace_scale(self.sensitivity, self.epsilon)
        self.scale = float(self.noise_scale)
        self.noise: NoiseSampler = exact_noise(seed, noise)

    def release(self, counts: np.ndarray) -> np.ndarray:
        """Noisy counts ``R~ = R + X`` as int64, same shape as ``counts`` (which must hold integers)."""
        array = np.asarray(counts)
        if array.ndim != 2 or array.size == 0:
            raise ValueError(f"counts must be a non-empty T x m array, got shape {array.shape}.")
        if not np.issubdtype(array.dtype, np.integer):
            if not np.issubdtype(array.dtype, np.floating):
                raise ValueError(f"counts must hold integers, got dtype {array.dtype}.")
            with np.errstate(invalid="ignore"):
                bad = ~(np.isfinite(array) & (array == np.rint(array)) & (np.abs(array) < 2.0**62))
            if bad.any():
                row, column = (int(i) for i in np.argwhere(bad)[0])
                value = array[row, column].item()
                raise ValueError(f"counts must hold integers, got counts[{row}, {column}] = {value!r}.")
        return array.astype(np.int64) + self.noise.laplace_units(self.noise_scale, array.shape)

    def privacy(self) -> PrivacyGuarantee:
        """What one step's release spends."""
        counts = Part(what="noisy counts of one time step", budget=EpsilonDelta(self.epsilon), text=(
            f"{_noise_name(self.noise)} of scale sensitivity/epsilon rounded up = {self.scale!r} per cell "
            f"(count-vector L1 sensitivity {self.sensitivity}, so {self.sensitivity}/scale <= epsilon); "
            "epsilon per time step; T steps of one user's trajectory compose to T * epsilon"
        ))
        return PrivacyGuarantee.of(counts, neighbours=USER_STEP)
