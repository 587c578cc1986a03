"""The ``dpstream`` command line.

A command lives in the module named after it (``evaluate-X`` beside ``X``, ``topl-demo``
beside ``demo``); each module registers its commands on the shared group :data:`cli` when it
is imported here.  What they share is in ``_``-prefixed modules, which command modules import
(never each other): ``_app`` the group, exit codes, signals and one-line messages; ``_options``
the shared option parsers and help; ``_outputs`` the output checks and the outputs written whole
or not at all; ``_spark`` what the commands on Spark share.
"""

from dpstream.cli import (
    aggregate,  # noqa: F401  (registers aggregate)
    audit,  # noqa: F401  (registers audit)
    budget,  # noqa: F401  (registers budget)
    count_of_counts,  # noqa: F401  (registers count-of-counts, evaluate-count-of-counts)
    demo,  # noqa: F401  (registers demo, topl-demo)
    evaluate,  # noqa: F401  (registers evaluate)
    pak_improvement,  # noqa: F401  (registers pak-improvement)
    postprocess,  # noqa: F401  (registers postprocess, evaluate-postprocess)
    release,  # noqa: F401  (registers release)
    release_locations,  # noqa: F401  (registers release-locations)
    serve,  # noqa: F401  (registers serve)
    token,  # noqa: F401  (registers token create, list, revoke)
)
from dpstream.cli._app import cli, main

__all__ = ["cli", "main"]
