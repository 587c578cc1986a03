"""Every study of dpstream, its metrics and its figures; nothing here is a mechanism.

One module per family:

* :mod:`~dpstream.evaluation.metrics` -- range queries (random, or of a fixed length) and their errors
  (MSE, MAE, MMSE, MMAE);
* :mod:`~dpstream.evaluation.streams` -- the stream studies (ToPS, hierarchy, ToPL, baselines,
  percentiles, threshold methods) in one ``STUDIES`` table, and the demos' moving averages;
* :mod:`~dpstream.evaluation.pak_analysis` -- PAK's parameter optimizer (Eq. 16), its time-lag
  heuristics and its improvement factor over the binary tree (Section VII-A);
* :mod:`~dpstream.evaluation.count_of_counts` -- earth-mover's errors per level and the
  comparison of count-of-counts strategies;
* :mod:`~dpstream.evaluation.postprocess` -- the post-processing studies of Cao et al., their metrics,
  and the noisy-vs-cleaned counts over time;
* :mod:`~dpstream.evaluation.plots` -- the one figure helper every plot goes through.

Long computations report progress through one optional callback ``progress(done, total)``
(:mod:`dpstream._progress`); the command line draws it as a bar.

The package exports the stream studies and the range-query metrics; the other families are
imported from their modules.  Mechanism packages import nothing from here.
"""

from dpstream.evaluation.metrics import (
    METRICS,
    RangeQueries,
    error_metrics,
    fixed_length_queries,
    prefix_range_sums,
    random_queries,
)
from dpstream.evaluation.streams import (
    STUDIES,
    ExperimentConfig,
    extend_stream,
    run_study,
    summarize,
)

__all__ = [
    "METRICS",
    "STUDIES",
    "ExperimentConfig",
    "RangeQueries",
    "error_metrics",
    "extend_stream",
    "fixed_length_queries",
    "prefix_range_sums",
    "random_queries",
    "run_study",
    "summarize",
]
