"""A statistical auditor of dpstream's privacy claims (``dpstream audit``).

For each mechanism and an adversarial pair of neighbouring inputs, the auditor runs the
mechanism many times on both, chooses distinguishing events on half of the runs and bounds
their probabilities on the other half with Clopper-Pearson intervals: an empirical lower
bound on epsilon, printed next to the claimed one (:mod:`dpstream.audit.core`).  It also checks
that no output on one input is impossible under the other (the support test).  A mechanism
fails when its lower bound exceeds its claim or when an output is impossible under the
neighbour.  :mod:`dpstream.audit.mechanisms` holds the registry and :func:`run_audit`.

Passing is evidence, not proof: the audit only finds violations that its events and sample
sizes can see.  Failing the epsilon check is proof up to the stated confidence.
"""

from dpstream.audit.core import (
    DEFAULT_ALPHA,
    DEFAULT_EVENTS,
    AuditResult,
    Event,
    MechanismAdapter,
    UnverifiableSupport,
    audit_mechanism,
    clopper_pearson,
    epsilon_lower_bound,
    format_table,
    granularity_of,
    on_lattice,
)
from dpstream.audit.mechanisms import MECHANISMS, experiments, run_audit

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_EVENTS",
    "MECHANISMS",
    "AuditResult",
    "Event",
    "MechanismAdapter",
    "UnverifiableSupport",
    "audit_mechanism",
    "clopper_pearson",
    "epsilon_lower_bound",
    "experiments",
    "format_table",
    "granularity_of",
    "on_lattice",
    "run_audit",
]
