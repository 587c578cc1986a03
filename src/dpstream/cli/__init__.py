"""The ``dpstream`` command line.

A command lives in the module named after it (``evaluate-X`` beside ``X``, ``topl-demo``
beside ``demo``); each module registers its commands on the shared group :data:`cli` when it
is imported here.  ``_common`` holds what they share: the group, one-line errors, the output
checks and the seed warning.
"""

from dpstream.cli import (
    audit,  # noqa: F401  (registers audit)
    budget,  # noqa: F401  (registers budget)
    count_of_counts,  # noqa: F401  (registers count-of-counts, evaluate-count-of-counts)
    demo,  # noqa: F401  (registers demo, topl-demo)
    evaluate,  # noqa: F401  (registers evaluate)
    pak_improvement,  # noqa: F401  (registers pak-improvement)
    postprocess,  # noqa: F401  (registers postprocess, evaluate-postprocess)
    release,  # noqa: F401  (registers release)
    serve,  # noqa: F401  (registers serve)
)
from dpstream.cli._common import cli, main

__all__ = ["cli", "main"]
