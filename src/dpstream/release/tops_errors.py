"""The exact standard error of the noise of each value ToPS's perturber releases.

Given the public structure (chunks of ``r`` values, leaves of ``b^s`` values or of one period from the
public phase, ``d`` measured levels of fan-out ``b``), theta and the smoother, a released value's noise is
a fixed linear function of the independent node noises, whose law is known (discrete Laplace or discrete
Gaussian on the grid, every node the same variance ``v``):

* Consistency.  The consistent leaves are the least-squares estimate of a full forest's measurements,
  so their noise has covariance ``v (X^T X)^-1 = v (I + sum_{m=1}^{d-1} w_m J_m)`` (the inverse that
  :func:`~dpstream.hierarchy.tree.consistent_leaves` applies: ``J_m`` sums over the ``b^m`` leaves under
  one level-``m`` node, ``w_m = -(b - 1)^2 / ((b^m - 1)(b^(m+1) - 1))``); chunks are independent.
* The smoother's prediction for leaf ``g`` is a fixed linear function of the earlier leaves' estimates
  ``u_i / w_i`` (``w_i`` the leaf's length, or its public shape summed over its values) and of the prior,
  a constant: recent (the last), mean (all, and the prior, equally), moving average (the last ``window``)
  and exponential (geometric weights).  The median is not linear: with leaves of more than one value
  its predictions have no linear noise, and :func:`check_linear` refuses it.
* A leaf's values but the last are its prediction (times the public shape); the last is ``u_g`` minus
  ``before_g`` predictions (its other values' share), so it is correlated with the prediction through
  the earlier leaves of its chunk.

Hence ``Var = v (C_gg + before^2 c^2 Q - 2 before c K)`` for a leaf's last value and ``v shape^2 c^2 Q`` for
the others, with ``c Q c`` the prediction's quadratic form in the leaves' covariance and ``c K`` its
covariance with leaf ``g``: computed here in closed form from prefix sums over each level's groups
(vectorized; O(leaves of one chunk) memory whatever the position), never from the data.  Truncation at
theta, the grid's rounding and the smoothing's bias are not noise and are not in it.  A range's sum
(:func:`range_standard_error`) adds the noise of the whole leaves it covers and, in the leaves it cuts,
partial sums of predictions.  :func:`perturber_error_model` states all this depends on as plain data (what
the service keeps among a stream's facts), :func:`model_standard_errors` reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

import numpy as np
from scipy.signal import lfilter

from dpstream.smoothers import SMOOTHERS, make_smoother

__all__ = ["check_linear", "model_standard_errors", "perturber_error_model", "perturber_standard_errors",
           "range_standard_error"]


def check_linear(smoother: Any, block_size: int) -> None:
    """Refuse standard errors where the released noise is not linear: the median smoother over leaves of more
    than one value (one-value leaves release their estimate alone, whatever the smoother)."""
    name = getattr(smoother, "name", None)
    linear = name in ("recent", "mean", "moving_average", "exponential") and type(smoother) is SMOOTHERS[name]
    if block_size > 1 and not linear:
        raise ValueError(f"standard errors need a linear smoother (recent, mean, moving_average or exponential): "
                         f"the {name or type(smoother).__name__} smoother's predictions are not a linear function of "
                         "the noise, so their noise has no exact standard error.")


@dataclass(frozen=True, eq=False)  # hashed by identity: the cached chunks of one structure
class _Chunk:
    """One chunk's leaves: ``v = 1 / w`` per leaf, its prefix sums, and per level m >= 1 the weight ``w_m``,
    the group size ``b^m``, the prefix sums of the groups' squared sums."""

    v: np.ndarray
    prefix: np.ndarray  # S[j] = sum of v over [0, j)
    squares: np.ndarray  # sum of v^2 over [0, j)
    weights: tuple[float, ...]
    sizes: tuple[int, ...]
    group_squares: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, v: np.ndarray, fanout: int, levels: int) -> _Chunk:
        prefix = np.concatenate(([0.0], np.cumsum(v)))
        weights = tuple(-((fanout - 1) ** 2) / ((fanout**m - 1) * (fanout ** (m + 1) - 1)) for m in range(1, levels))
        sizes = tuple(fanout**m for m in range(1, levels))
        group_squares = []
        for size in sizes:
            edges = np.minimum(np.arange(0, v.size + size, size), v.size)
            group_squares.append(np.concatenate(([0.0], np.cumsum(np.diff(prefix[edges]) ** 2))))
        return cls(v=v, prefix=prefix, squares=np.concatenate(([0.0], np.cumsum(v * v))), weights=weights,
                   sizes=sizes, group_squares=tuple(group_squares))

    @property
    def diagonal(self) -> float:
        """A leaf's variance in units of ``v``: ``1 + sum_m w_m``."""
        return 1.0 + sum(self.weights)

    def quadratic(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """``sum_{i, j in [lo, hi)} v_i v_j C_ij`` (leaves of this chunk), vectorized over windows."""
        S = self.prefix
        total = self.squares[hi] - self.squares[lo]
        nonempty = hi > lo
        last = np.maximum(hi - 1, lo)
        for weight, size, squares in zip(self.weights, self.sizes, self.group_squares):
            first_group, last_group = lo // size, last // size
            end_first = np.minimum((first_group + 1) * size, self.v.size)
            start_last = last_group * size
            same = first_group == last_group
            split = ((S[end_first] - S[lo]) ** 2 + (S[hi] - S[start_last]) ** 2
                     + squares[last_group] - squares[np.minimum(first_group + 1, last_group)])
            inside = np.where(same, (S[hi] - S[lo]) ** 2, split)
            total = total + weight * np.where(nonempty, inside, 0.0)
        return total

    def cross(self, lo: np.ndarray, leaf: np.ndarray) -> np.ndarray:
        """``sum_{i in [lo, leaf)} v_i C_{i, leaf}`` (leaves of this chunk, ``lo <= leaf``)."""
        total = np.zeros(leaf.shape)
        for weight, size in zip(self.weights, self.sizes):
            start = np.maximum(lo, leaf // size * size)
            total = total + weight * (self.prefix[leaf] - self.prefix[start])
        return total

    @lru_cache(maxsize=8)  # noqa: B019 - a few structures' chunks, kept by _chunks' cache anyway
    def geometric(self, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """For the exponential smoother: per leaf j, ``E_j = sum_{i < j} beta^(j-1-i) v_i e_i`` restricted to this
        chunk has variance ``var[j]`` (in units of ``v``) and covariance ``cross[j]`` with leaf j; ``var[B]`` is
        the whole chunk's."""
        n = self.v.size
        cross = np.zeros(n)
        for weight, size in zip(self.weights, self.sizes):
            padded = -(-n // size) * size
            v = np.zeros(padded)
            v[:n] = self.v
            shifted = np.zeros_like(v.reshape(-1, size))
            shifted[:, 1:] = v.reshape(-1, size)[:, :-1]  # R_j = beta R_{j-1} + v_{j-1}, restarted per group
            cross += weight * lfilter([1.0], [1.0, -beta], shifted, axis=1).ravel()[:n]
        # Var(E_{j+1}) = beta^2 Var(E_j) + 2 beta v_j cross_j + v_j^2 C_jj, from Var(E_0) = 0
        increments = 2.0 * beta * self.v * cross + self.v**2 * self.diagonal
        var = np.concatenate(([0.0], lfilter([1.0], [1.0, -beta * beta], increments)))
        return var, cross


def _chunks(perturber: Any) -> tuple[_Chunk, _Chunk]:
    """The first chunk's leaves and every later chunk's (they differ in a periodic perturber's partial first
    leaf, whose skipped positions do not count, and in its public shape); cached per public structure."""
    cumulative = getattr(perturber, "_cumulative", None)
    return _chunks_of(perturber.block_size, perturber.blocks_per_chunk, perturber.max_range, perturber.phase,
                      perturber.fanout, perturber.measured_levels, None if cumulative is None else cumulative.tobytes())


@lru_cache(maxsize=16)
def _chunks_of(bs: int, count: int, r: int, phase: int, fanout: int, levels: int,
               cumulative: bytes | None) -> tuple[_Chunk, _Chunk]:
    starts = np.arange(count) * bs
    shape = None if cumulative is None else np.frombuffer(cumulative, dtype=np.float64)
    out = []
    for origin in (phase, 0):
        skipped = np.maximum(starts, origin) - starts
        weights = np.minimum(starts + bs, r) - np.maximum(starts, origin) if shape is None else \
            shape[bs] - shape[skipped]
        out.append(_Chunk.of(1.0 / np.asarray(weights, dtype=np.float64), fanout, levels))
    return out[0], out[1]


def _windows(smoother: Any, leaf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The window ``[lo, leaf)`` of earlier leaves a uniform smoother averages, and its coefficient."""
    name = smoother.name
    if name == "recent":
        return np.maximum(leaf - 1, 0), np.where(leaf > 0, 1.0, 0.0)
    if name == "mean":
        return np.zeros_like(leaf), 1.0 / (leaf + 1.0)
    window = smoother.window  # moving_average: the last min(w, g + 1) of a_0 .. a_g, a_0 the prior
    return leaf - np.minimum(window, leaf), 1.0 / np.minimum(window, leaf + 1.0)


def _uniform(first: _Chunk, later: _Chunk, count: int, smoother: Any, chunk: np.ndarray, local: np.ndarray,
             leaf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(c^2 Q, c K)`` of a uniform window's prediction over leaves spread across chunks."""
    lo, coefficient = _windows(smoother, leaf)
    lo_chunk, lo_local = lo // count, lo % count
    same = lo_chunk == chunk
    # the chunk the window starts in (to its end, or to the leaf), the chunks between, the leaf's own chunk
    head_hi = np.where(same, local, count).astype(np.int64)
    head = np.where(lo_chunk == 0, first.quadratic(lo_local, head_hi), later.quadratic(lo_local, head_hi))
    between = np.maximum(chunk - lo_chunk - 1, 0).astype(np.float64)
    full_later = later.quadratic(np.array([0]), np.array([count]))[0]
    tail_lo = np.zeros_like(local)
    tail = np.where(same, 0.0, np.where(chunk == 0, first.quadratic(tail_lo, local), later.quadratic(tail_lo, local)))
    quadratic = head + between * full_later + tail
    own_lo = np.where(same, lo_local, 0)
    cross = np.where(chunk == 0, first.cross(own_lo, local), later.cross(own_lo, local))
    return coefficient**2 * quadratic, coefficient * cross


def _exponential(first: _Chunk, later: _Chunk, count: int, alpha: float, chunk: np.ndarray,
                 local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(c^2 Q, c K)`` of the exponential smoother's prediction ``alpha E_g`` (geometric weights over every
    earlier leaf; the chunks before the leaf's carried by powers of ``beta^2``, summed in closed form)."""
    beta = 1.0 - alpha
    var0, cross0 = first.geometric(beta)
    var1, cross1 = later.geometric(beta)
    decay = beta ** (2 * count)
    # variance at the start of chunk k >= 1: var0[B] decayed k - 1 chunks, plus k - 1 later chunks' var1[B]
    k = np.maximum(chunk - 1, 0).astype(np.float64)
    carried = np.where(chunk == 0, 0.0, var0[count] * decay**k
                       + var1[count] * (k if decay == 1.0 else (1.0 - decay**k) / (1.0 - decay)))
    own = np.where(chunk == 0, var0[local], var1[local])
    variance = beta ** (2.0 * local) * carried + own
    cross = np.where(chunk == 0, cross0[local], cross1[local])
    return alpha**2 * variance, alpha * cross


def perturber_standard_errors(perturber: Any, positions: object) -> np.ndarray:
    """The exact standard errors of the noise of the values ``perturber`` (a
    :class:`~dpstream.release.perturber.HierarchicalPerturber` or its periodic variant) releases at
    ``positions`` (0 its first released value), from its public structure alone (see the module docstring)."""
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size and positions.min() < 0:
        raise ValueError(f"positions must be non-negative, got {int(positions.min())}.")
    flat = positions.ravel()
    bs, count, r = perturber.block_size, perturber.blocks_per_chunk, perturber.max_range
    check_linear(perturber.smoother, bs)
    clock = flat + perturber.phase
    chunk, inside = clock // r, clock % r
    local = inside // bs
    leaf = chunk * count + local
    first, later = _chunks(perturber)
    diagonal = first.diagonal
    if bs == 1:  # every value is its leaf's estimate
        return np.full(positions.shape, np.sqrt(perturber.node_variance * diagonal))
    v = np.where(chunk == 0, first.v[local], later.v[local])
    is_last = inside == np.minimum((local + 1) * bs, r) - 1
    smoother = perturber.smoother
    if smoother.name == "exponential":
        quadratic, cross = _exponential(first, later, count, smoother.alpha, chunk, local)
    else:
        quadratic, cross = _uniform(first, later, count, smoother, chunk, local, leaf)
    shape = getattr(perturber, "shape", None)
    factor = np.ones(flat.shape) if shape is None else shape[clock % bs]
    before = 1.0 / v - factor  # the leaf's other values' share of the predictions
    last = diagonal + before**2 * quadratic - 2.0 * before * cross
    variance = np.where(is_last, last, factor**2 * quadratic)
    return np.sqrt(perturber.node_variance * np.maximum(variance, 0.0)).reshape(positions.shape)


def _prediction(perturber: Any, first: _Chunk, later: _Chunk, leaf: int) -> tuple[int, np.ndarray]:
    """The noise weights of the prediction for ``leaf`` on the consistent noises of the leaves ``[lo, leaf)``."""
    count, smoother = perturber.blocks_per_chunk, perturber.smoother
    if smoother.name == "exponential":
        lo = 0
        coefficients = smoother.alpha * (1.0 - smoother.alpha) ** (leaf - 1.0 - np.arange(leaf))
    else:
        window, coefficient = _windows(smoother, np.array([leaf]))
        lo = int(window[0])
        coefficients = np.full(leaf - lo, float(coefficient[0]))
    leaves = np.arange(lo, leaf)
    return lo, coefficients * np.where(leaves < count, first.v[np.minimum(leaves, count - 1)], later.v[leaves % count])


def _leaf_sum(perturber: Any, first: _Chunk, later: _Chunk, clock: int, stop: int) -> tuple[int, np.ndarray]:
    """The noise weights (on the leaves ``[lo, leaf]``) of the sum of the released values at clock positions
    ``[clock, stop)`` of one leaf: ``e - (shape before clock) P`` when it reaches the leaf's last value, else
    ``(shape over the range) P`` (the leaf's values but the last are its prediction)."""
    bs, count, r = perturber.block_size, perturber.blocks_per_chunk, perturber.max_range
    chunk, inside = divmod(clock, r)
    local = inside // bs
    leaf = chunk * count + local
    leaf_start = chunk * r + local * bs
    end = chunk * r + min((local + 1) * bs, r)  # one past the leaf's last clock position
    origin = max(leaf_start, perturber.phase)  # its first released position
    cumulative = getattr(perturber, "_cumulative", None)
    shape_sum = (lambda a, b: b - a) if cumulative is None else (
        lambda a, b: float(cumulative[b - leaf_start] - cumulative[a - leaf_start]))
    lo, prediction = _prediction(perturber, first, later, leaf) if bs > 1 else (leaf, np.zeros(0))
    weights = np.zeros(leaf + 1 - lo)
    if stop == end:
        weights[:-1] = -shape_sum(origin, clock) * prediction
        weights[-1] = 1.0
    else:
        weights[:-1] = shape_sum(clock, stop) * prediction
    return lo, weights


def range_standard_error(perturber: Any, start: int, stop: int) -> float:
    """The exact standard error of the noise of the sum of the values ``perturber`` released at positions
    ``[start, stop)``: whole leaves add their consistent noise, the leaves it cuts their partial sums of
    predictions (:func:`_leaf_sum`), correlated through the chunks' consistency; O(leaves before ``stop``) for the
    mean and exponential smoothers (their predictions weigh every earlier leaf)."""
    if not 0 <= start < stop:
        raise ValueError(f"a range needs 0 <= start < stop, got [{start}, {stop}).")
    bs, count, r, phase = perturber.block_size, perturber.blocks_per_chunk, perturber.max_range, perturber.phase
    check_linear(perturber.smoother, bs)
    first, later = _chunks(perturber)
    clock, stop = start + phase, stop + phase

    def leaf_end(position: int) -> int:
        chunk, inside = divmod(position, r)
        return chunk * r + min((inside // bs + 1) * bs, r)

    def leaf_of(position: int) -> int:
        return position // r * count + position % r // bs

    head_end = min(leaf_end(clock), stop)
    tail_start = max(head_end, stop - 1 - (stop - 1) % r % bs)  # where the leaf of the last position starts
    parts = [_leaf_sum(perturber, first, later, clock, head_end)]
    if tail_start < stop and leaf_of(tail_start) != leaf_of(clock):
        parts.append(_leaf_sum(perturber, first, later, tail_start, stop))
    lo = min(part[0] for part in parts)
    weights = np.zeros(leaf_of(stop - 1) + 1 - lo)
    for part_lo, part in parts:
        weights[part_lo - lo : part_lo - lo + part.size] += part
    whole = np.arange(leaf_of(head_end - 1) + 1, leaf_of(tail_start) if tail_start < stop else leaf_of(stop - 1) + 1)
    weights[whole - lo] += 1.0
    return float(np.sqrt(perturber.node_variance * _quadratic(weights, lo, count, perturber.fanout,
                                                               first.weights)))


def _quadratic(weights: np.ndarray, lo: int, count: int, fanout: int, level_weights: tuple[float, ...]) -> float:
    """``a^T C a`` for weights ``a`` on the global leaves from ``lo``: chunk by chunk, ``|a|^2`` plus each level's
    ``w_m`` times its groups' squared sums (groups of ``b^m`` leaves from each chunk's start)."""
    first_chunk = lo // count
    chunks = -(-(lo + weights.size) // count) - first_chunk
    top = fanout ** len(level_weights)
    width = -(-count // top) * top
    grid = np.zeros((chunks, width))
    placed = np.zeros(chunks * count)
    placed[lo - first_chunk * count : lo - first_chunk * count + weights.size] = weights
    grid[:, :count] = placed.reshape(chunks, count)
    total = float(np.sum(weights * weights))
    for m, weight in enumerate(level_weights, start=1):
        total += weight * float(np.sum(grid.reshape(chunks, -1, fanout**m).sum(axis=2) ** 2))
    return total


def perturber_error_model(perturber: Any) -> dict[str, Any] | None:
    """What the standard errors of ``perturber``'s released values depend on, all public (one node's variance, the
    structure, the smoother, the period's profile), as plain data :func:`model_standard_errors` reads; None where
    the released noise is not linear (:func:`check_linear`)."""
    smoother = perturber.smoother
    try:
        check_linear(smoother, perturber.block_size)
    except ValueError:
        return None
    shape = getattr(perturber, "shape", None)
    return {"node_variance": perturber.node_variance, "perturber": {
        "block_size": perturber.block_size, "blocks_per_chunk": perturber.blocks_per_chunk,
        "max_range": perturber.max_range, "phase": perturber.phase, "fanout": perturber.fanout,
        "measured_levels": perturber.measured_levels, "shape": None if shape is None else shape.tolist(),
        "smoother": {"name": smoother.name, **{name: getattr(smoother, name) for name in ("window", "alpha")
                                                if hasattr(smoother, name)}}}}


def model_standard_errors(model: dict[str, Any], positions: object) -> np.ndarray:
    """:func:`perturber_standard_errors` of the perturber an :func:`perturber_error_model` describes."""
    structure = dict(model["perturber"])
    smoother = dict(structure.pop("smoother"))  # the model is left as it was
    shape = structure.pop("shape")
    if shape is not None:
        shape = np.asarray(shape, dtype=np.float64)
        structure.update(shape=shape, _cumulative=np.concatenate(([0.0], np.cumsum(shape))))
    perturber = SimpleNamespace(**structure, node_variance=model["node_variance"],
                                smoother=make_smoother(smoother.pop("name"), **smoother))
    return perturber_standard_errors(perturber, positions)
