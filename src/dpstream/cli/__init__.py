"""The ``dpstream`` command line.

One module per family of commands; each registers its commands on the shared group
:data:`cli` when imported here.  ``_common`` holds what they share.
"""

from dpstream.cli import count_of_counts  # noqa: F401  (registers count-of-counts, evaluate-count-of-counts)
from dpstream.cli import stream  # noqa: F401  (registers release, evaluate, demo, topl-demo)
from dpstream.cli import baselines  # noqa: F401  (registers pak-improvement)
from dpstream.cli import postprocess  # noqa: F401  (registers postprocess, evaluate-postprocess)
from dpstream.cli._common import cli, main

__all__ = ["cli", "main"]
