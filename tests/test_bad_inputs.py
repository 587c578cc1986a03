"""A scripted sweep of bad inputs over every command.

Every case runs in a workspace of small files and asserts what the command line promises
(``dpstream.cli._app``): the expected exit code (2 for a usage error, 1 for a runtime error),
no traceback, exactly one ``Error:`` line on stderr quoting at most 80 characters of any value,
and a workspace left exactly as it was -- no output created, no temporary or partial file left,
no input changed.  Cases run in-process (``CliRunner``), each under a time limit, so that none can
hang the suite; what needs real descriptors or signals is in ``test_cli_outputs.py``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import socket
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.count_of_counts import housing_data, write_tables
from dpstream.durable.budget_store import BudgetStore
from dpstream.postprocess import FIG3_MATRIX, LaplaceCounts, simulate_counts

#: Seconds a case may take before it counts as a hang.
CASE_SECONDS = 20

#: Options of a release that would succeed on s.csv.
OK = "--epsilon 1 --upper-bound 100 --hold 50 --max-range 64 --seed 1"
#: Options of a zCDP (or pure) release without a hold-out on s.csv, less --method and --delta.
ZCDP = "--epsilon 1 --upper-bound 100 --seed 1"
COC = "count-of-counts --entities t/entities.csv --groups t/groups.csv --hierarchy t/hierarchy.csv"
PP = "postprocess noisy.csv --transition T.csv --users 50 --epsilon 0.5"
LONG = "x" * 5000

USAGE, RUNTIME = 2, 1

CASES: list[tuple[str, str, int]] = [
    # -- release: the command line is wrong (2) ---------------------------------------------
    ("release-no-output", f"release s.csv {OK}", USAGE),
    ("release-no-input", "release", USAGE),
    ("release-no-epsilon", "release s.csv -o out.txt --upper-bound 100", USAGE),
    ("release-no-bound", "release s.csv -o out.txt --epsilon 1", USAGE),
    ("release-epsilon-word", "release s.csv -o out.txt --epsilon zero --upper-bound 100", USAGE),
    ("release-epsilon-negative", "release s.csv -o out.txt --epsilon -1 --upper-bound 100", USAGE),
    ("release-epsilon-zero", "release s.csv -o out.txt --epsilon 0 --upper-bound 100", USAGE),
    ("release-epsilon-nan", "release s.csv -o out.txt --epsilon nan --upper-bound 100", USAGE),
    ("release-epsilon-inf", "release s.csv -o out.txt --epsilon inf --upper-bound 100", USAGE),
    ("release-epsilon-tiny", "release s.csv -o out.txt --epsilon 1e-13 --upper-bound 100", USAGE),
    ("release-epsilon-hex", "release s.csv -o out.txt --epsilon 0x10 --upper-bound 100", USAGE),
    ("release-epsilon-long", f"release s.csv -o out.txt --epsilon {LONG} --upper-bound 100", USAGE),
    ("release-bound-negative", "release s.csv -o out.txt --epsilon 1 --upper-bound -5", USAGE),
    ("release-bound-zero", "release s.csv -o out.txt --epsilon 1 --upper-bound 0", USAGE),
    ("release-bound-nan", "release s.csv -o out.txt --epsilon 1 --upper-bound nan", USAGE),
    ("release-bound-overflow", "release s.csv -o out.txt --epsilon 1 --upper-bound 1e400", USAGE),
    ("release-hold-zero", f"release s.csv -o out.txt {OK} --hold 0", USAGE),
    ("release-hold-negative", f"release s.csv -o out.txt {OK} --hold -5", USAGE),
    ("release-hold-fraction", f"release s.csv -o out.txt {OK} --hold 1.5", USAGE),
    ("release-max-range-one", f"release s.csv -o out.txt {OK} --max-range 1", USAGE),
    ("release-max-range-zero", f"release s.csv -o out.txt {OK} --max-range 0", USAGE),
    ("release-fanout-one", f"release s.csv -o out.txt {OK} --fanout 1", USAGE),
    ("release-method-unknown", f"release s.csv -o out.txt {OK} --method nope", USAGE),
    ("release-smoother-unknown", f"release s.csv -o out.txt {OK} --smoother nope", USAGE),
    ("release-window-zero", f"release s.csv -o out.txt {OK} --smoother moving_average --window 0", USAGE),
    ("release-alpha-two", f"release s.csv -o out.txt {OK} --smoother exponential --alpha 2", USAGE),
    ("release-threshold-epsilon-negative", f"release s.csv -o out.txt {OK} --threshold-epsilon -1", USAGE),
    ("release-threshold-step-zero", f"release s.csv -o out.txt {OK} --threshold-step 0", USAGE),
    ("release-threshold-step-tiny", f"release s.csv -o out.txt {OK} --threshold-step 1e-9", USAGE),
    ("release-bt-hold", f"release s.csv -o out.txt {OK} --method bt", USAGE),
    ("release-tops-delta", f"release s.csv -o out.txt {OK} --delta 0.1", USAGE),
    ("release-topl-fanout", f"release s.csv -o out.txt {OK} --method topl --fanout 4", USAGE),
    ("release-pak-delta-two", f"release s.csv -o out.txt {OK} --method pak --delta 2", USAGE),
    ("release-pak-fraction-one", f"release s.csv -o out.txt {OK} --method pak --threshold-fraction 1", USAGE),
    ("release-pak-fraction-zero", f"release s.csv -o out.txt {OK} --method pak --threshold-fraction 0", USAGE),
    ("release-pak-noise-unknown", f"release s.csv -o out.txt {OK} --method pak --noise cauchy", USAGE),
    ("release-pak-overflow", "release s.csv -o out.txt --method pak --epsilon 1 --upper-bound 1e307 --hold 50",
     USAGE),
    ("release-pak-uncapped-overflow",
     "release s.csv -o out.txt --method pak-uncapped --epsilon 1 --upper-bound 1e307 --hold 50", USAGE),
    ("release-bt-overflow", "release s.csv -o out.txt --method bt --epsilon 1e-12 --upper-bound 1e300", USAGE),
    ("release-tops-overflow",
     "release s.csv -o out.txt --epsilon 1e-12 --upper-bound 1e300 --threshold-step 1e295 --hold 50", USAGE),
    ("release-topl-overflow", "release s.csv -o out.txt --method topl --epsilon 1e-12 --upper-bound 1e300 --hold 50",
     USAGE),
    ("release-topl-epsilon-large", f"release s.csv -o out.txt {OK} --method topl --epsilon 31", USAGE),
    ("release-seed-word", f"release s.csv -o out.txt {OK} --seed abc", USAGE),
    ("release-unknown-flag", f"release s.csv -o out.txt {OK} --frobnicate", USAGE),
    ("release-output-trailing-slash", f"release s.csv -o newdir/ {OK}", USAGE),
    ("release-output-existing-dir-slash", f"release s.csv -o adir/ {OK} --force", USAGE),
    ("release-output-directory", f"release s.csv -o adir {OK} --force", USAGE),
    ("release-output-link-to-directory", f"release s.csv -o linkdir {OK} --force", USAGE),
    ("release-input-directory", f"release adir -o out.txt {OK}", USAGE),
    ("release-column-long", f"release two.csv -o out.txt {OK} --column {LONG}", RUNTIME),
    # -- release under zCDP, and budget stores -------------------------------------------------
    ("release-bt-zcdp-no-delta", f"release s.csv -o out.txt {ZCDP} --method bt-zcdp", USAGE),
    ("release-bt-zcdp-delta-zero", f"release s.csv -o out.txt {ZCDP} --method bt-zcdp --delta 0", USAGE),
    ("release-bt-zcdp-delta-one", f"release s.csv -o out.txt {ZCDP} --method bt-zcdp --delta 1", USAGE),
    ("release-bt-zcdp-delta-negative", f"release s.csv -o out.txt {ZCDP} --method bt-zcdp --delta -1", USAGE),
    ("release-bt-zcdp-delta-nan", f"release s.csv -o out.txt {ZCDP} --method bt-zcdp --delta nan", USAGE),
    ("release-bt-zcdp-delta-inf", f"release s.csv -o out.txt {ZCDP} --method bt-zcdp --delta inf", USAGE),
    ("release-bt-zcdp-delta-word", f"release s.csv -o out.txt {ZCDP} --method bt-zcdp --delta small", USAGE),
    ("release-bt-zcdp-epsilon-tiny", f"release s.csv -o out.txt {ZCDP} --method bt-zcdp --epsilon 1e-13 --delta 1e-6",
     USAGE),
    ("release-bt-zcdp-rho-tiny", f"release s.csv -o out.txt {ZCDP} --method bt-zcdp --epsilon 1e-12 --delta 1e-300",
     USAGE),
    ("release-bt-zcdp-granularity-tiny",
     f"release s.csv -o out.txt {ZCDP} --method bt-zcdp --delta 1e-6 --granularity 1e-300", USAGE),
    ("release-bt-zcdp-hold", f"release s.csv -o out.txt {ZCDP} --method bt-zcdp --delta 1e-6 --hold 5", USAGE),
    ("release-sqrt-zcdp-no-delta", f"release s.csv -o out.txt {ZCDP} --method sqrt-zcdp --max-range 64", USAGE),
    ("release-sqrt-zcdp-delta-nan", f"release s.csv -o out.txt {ZCDP} --method sqrt-zcdp --delta nan --max-range 64",
     USAGE),
    ("release-sqrt-zcdp-max-range-zero", f"release s.csv -o out.txt {ZCDP} --method sqrt-zcdp --delta 1e-6 "
     "--max-range 0", USAGE),
    ("release-sqrt-zcdp-max-range-one", f"release s.csv -o out.txt {ZCDP} --method sqrt-zcdp --delta 1e-6 "
     "--max-range 1", USAGE),
    ("release-sqrt-zcdp-max-range-huge", f"release s.csv -o out.txt {ZCDP} --method sqrt-zcdp --delta 1e-6 "
     "--max-range 99999999999999999999", USAGE),
    ("release-sqrt-zcdp-max-range-default", f"release s.csv -o out.txt {ZCDP} --method sqrt-zcdp --delta 1e-6", USAGE),
    ("release-tops-zcdp-no-delta", f"release s.csv -o out.txt {ZCDP} --method tops-zcdp --hold 50", USAGE),
    ("release-tops-zcdp-delta-one", f"release s.csv -o out.txt {ZCDP} --method tops-zcdp --hold 50 --delta 1", USAGE),
    ("release-tops-zcdp-epsilon-tiny", f"release s.csv -o out.txt {ZCDP} --method tops-zcdp --hold 50 --delta 1e-6 "
     "--epsilon 1e-12", USAGE),
    ("release-tops-zcdp-epsilon-huge", f"release s.csv -o out.txt {ZCDP} --method tops-zcdp --hold 50 --delta 1e-6 "
     "--epsilon 1e300", USAGE),
    ("release-tops-zcdp-median-standard-errors", f"release s.csv -o out.txt {ZCDP} --method tops-zcdp --hold 50 "
     "--delta 1e-6 --smoother median --standard-errors", USAGE),
    ("release-topl-standard-errors", f"release s.csv -o out.txt {OK} --method topl --standard-errors", USAGE),
    ("release-bt-delta", f"release s.csv -o out.txt {ZCDP} --method bt --delta 1e-6", USAGE),
    ("release-budget-store-pure-for-zcdp", f"release s.csv -o out.txt {ZCDP} --method bt-zcdp --delta 1e-6 "
     "--budget-store pure.json", USAGE),
    ("release-budget-store-pak", f"release s.csv -o out.txt {OK} --method pak --budget-store pure.json", USAGE),
    ("release-budget-store-junk", f"release s.csv -o out.txt {ZCDP} --method bt --budget-store junk.txt", USAGE),
    ("release-budget-store-missing", f"release s.csv -o out.txt {ZCDP} --method bt --budget-store nope.json", USAGE),
    ("release-budget-store-damaged", f"release s.csv -o out.txt {ZCDP} --method bt --budget-store damaged.json", USAGE),
    ("release-budget-store-directory", f"release s.csv -o out.txt {ZCDP} --method bt --budget-store adir", USAGE),
    # -- release: what it found while running (1) -------------------------------------------
    ("release-input-missing", f"release nope.csv -o out.txt {OK}", RUNTIME),
    ("release-input-junk", f"release junk.txt -o out.txt {OK}", RUNTIME),
    ("release-input-empty", f"release empty.txt -o out.txt {OK}", RUNTIME),
    ("release-input-header-only", f"release header.txt -o out.txt {OK}", RUNTIME),
    ("release-input-negative", f"release neg.csv -o out.txt {OK}", RUNTIME),
    ("release-input-above-bound", f"release s.csv -o out.txt {OK} --upper-bound 10", RUNTIME),
    ("release-input-nan", f"release nan.csv -o out.txt {OK}", RUNTIME),
    ("release-input-inf", f"release inf.csv -o out.txt {OK}", RUNTIME),
    ("release-input-long-line", f"release long.txt -o out.txt {OK}", RUNTIME),
    ("release-input-long-field", f"release longfield.csv -o out.txt {OK}", RUNTIME),
    ("release-input-binary", f"release bin.dat -o out.txt {OK}", RUNTIME),
    ("release-input-bad-gzip", f"release bad.csv.gz -o out.txt {OK}", RUNTIME),
    ("release-input-ambiguous-columns", f"release two.csv -o out.txt {OK}", RUNTIME),
    ("release-input-unknown-column", f"release two.csv -o out.txt {OK} --column c", RUNTIME),
    ("release-input-short", f"release s.csv -o out.txt {OK} --hold 5000", RUNTIME),
    ("release-input-short-pak", f"release s.csv -o out.txt {OK} --method pak --hold 5000", RUNTIME),
    ("release-input-short-topl", f"release s.csv -o out.txt {OK} --method topl --hold 5000", RUNTIME),
    ("release-input-negative-pak", f"release neg.csv -o out.txt {OK} --method pak", RUNTIME),
    ("release-input-negative-bt", "release neg.csv -o out.txt --method bt --epsilon 1 --upper-bound 100", RUNTIME),
    ("release-input-negative-topl", f"release neg.csv -o out.txt {OK} --method topl", RUNTIME),
    ("release-input-nan-clip", f"release nan.csv -o out.txt {OK} --clip", RUNTIME),
    ("release-output-exists", f"release s.csv -o old.txt {OK}", RUNTIME),
    ("release-output-is-input", f"release s.csv -o s.csv {OK} --force", RUNTIME),
    ("release-output-is-input-link", f"release s.csv -o links.csv {OK} --force", RUNTIME),
    ("release-output-no-directory", f"release s.csv -o nodir/out.txt {OK}", RUNTIME),
    ("release-output-under-a-file", f"release s.csv -o s.csv/out.txt {OK}", RUNTIME),
    ("release-output-dangling-link", f"release s.csv -o dangling {OK} --force", RUNTIME),
    ("release-output-socket", f"release s.csv -o sock {OK} --force", RUNTIME),
    ("release-forced-bad-input-keeps-old", f"release neg.csv -o old.txt {OK} --force", RUNTIME),
    ("release-forced-short-input-keeps-old", f"release s.csv -o old.txt {OK} --force --hold 5000", RUNTIME),
    ("release-stdin-junk", f"release - -o out.txt {OK} <junk.txt", RUNTIME),
    ("release-stdin-empty", f"release - -o out.txt {OK} <empty.txt", RUNTIME),
    ("release-stdin-negative", f"release - -o out.txt {OK} <neg.csv", RUNTIME),
    ("release-stdin-long-line", f"release - -o out.txt {OK} <long.txt", RUNTIME),
    ("release-stdin-binary", f"release - -o out.txt {OK} <bin.dat", RUNTIME),
    ("release-stdin-nan", f"release - -o out.txt {OK} <nan.csv", RUNTIME),
    ("release-stdin-short", f"release - -o out.txt {OK} --hold 5000 <s.csv", RUNTIME),
    ("release-stdin-to-stdout-junk", f"release - -o - {OK} <junk.txt", RUNTIME),
    ("release-stdin-forced-keeps-old", f"release - -o old.txt {OK} --force <neg.csv", RUNTIME),
    # -- count-of-counts ----------------------------------------------------------------------
    ("coc-no-epsilon", f"{COC} -o out.csv", USAGE),
    ("coc-no-output", f"{COC} --epsilon 1", USAGE),
    ("coc-no-entities", "count-of-counts --groups t/groups.csv --hierarchy t/hierarchy.csv --epsilon 1 -o o.csv",
     USAGE),
    ("coc-epsilon-word", f"{COC} --epsilon abc -o out.csv", USAGE),
    ("coc-epsilon-negative", f"{COC} --epsilon -1 -o out.csv", USAGE),
    ("coc-epsilon-zero", f"{COC} --epsilon 0 -o out.csv", USAGE),
    ("coc-epsilon-nan", f"{COC} --epsilon nan -o out.csv", USAGE),
    ("coc-method-unknown", f"{COC} --epsilon 1 --method hx -o out.csv", USAGE),
    ("coc-method-empty", f"{COC} --epsilon 1 --method , -o out.csv", USAGE),
    ("coc-method-long", f"{COC} --epsilon 1 --method {LONG} -o out.csv", USAGE),
    ("coc-max-size-zero", f"{COC} --epsilon 1 --max-size 0 -o out.csv", USAGE),
    ("coc-max-size-negative", f"{COC} --epsilon 1 --max-size -3 -o out.csv", USAGE),
    ("coc-max-size-word", f"{COC} --epsilon 1 --max-size many -o out.csv", USAGE),
    ("coc-max-size-epsilon-negative", f"{COC} --epsilon 1 --max-size-epsilon -1 -o out.csv", USAGE),
    ("coc-isotonic-unknown", f"{COC} --epsilon 1 --isotonic l3 -o out.csv", USAGE),
    ("coc-merge-unknown", f"{COC} --epsilon 1 --merge median -o out.csv", USAGE),
    ("coc-seed-word", f"{COC} --epsilon 1 --seed x -o out.csv", USAGE),
    ("coc-output-trailing-slash", f"{COC} --epsilon 1 -o newdir/", USAGE),
    ("coc-output-directory", f"{COC} --epsilon 1 -o adir --force", USAGE),
    ("coc-entities-directory", "count-of-counts --entities adir --groups t/groups.csv --hierarchy t/hierarchy.csv "
     "--epsilon 1 -o out.csv", USAGE),
    ("coc-entities-missing", "count-of-counts --entities nope.csv --groups t/groups.csv --hierarchy t/hierarchy.csv "
     "--epsilon 1 -o out.csv", RUNTIME),
    ("coc-entities-junk", "count-of-counts --entities junk.txt --groups t/groups.csv --hierarchy t/hierarchy.csv "
     "--epsilon 1 -o out.csv", RUNTIME),
    ("coc-entities-empty", "count-of-counts --entities empty.txt --groups t/groups.csv --hierarchy t/hierarchy.csv "
     "--epsilon 1 -o out.csv", RUNTIME),
    ("coc-entities-binary", "count-of-counts --entities bin.dat --groups t/groups.csv --hierarchy t/hierarchy.csv "
     "--epsilon 1 -o out.csv", RUNTIME),
    ("coc-entities-long", "count-of-counts --entities long.txt --groups t/groups.csv --hierarchy t/hierarchy.csv "
     "--epsilon 1 -o out.csv", RUNTIME),
    ("coc-groups-junk", "count-of-counts --entities t/entities.csv --groups junk.txt --hierarchy t/hierarchy.csv "
     "--epsilon 1 -o out.csv", RUNTIME),
    ("coc-hierarchy-junk", "count-of-counts --entities t/entities.csv --groups t/groups.csv --hierarchy junk.txt "
     "--epsilon 1 -o out.csv", RUNTIME),
    ("coc-tables-swapped", "count-of-counts --entities t/groups.csv --groups t/entities.csv "
     "--hierarchy t/hierarchy.csv --epsilon 1 -o out.csv", RUNTIME),
    ("coc-output-exists", f"{COC} --epsilon 1 -o old.txt", RUNTIME),
    ("coc-output-is-input", f"{COC} --epsilon 1 -o t/groups.csv --force", RUNTIME),
    ("coc-output-no-directory", f"{COC} --epsilon 1 -o nodir/out.csv", RUNTIME),
    ("coc-output-socket", f"{COC} --epsilon 1 -o sock --force", RUNTIME),
    # -- evaluate-count-of-counts -------------------------------------------------------------
    ("ecoc-no-out", "evaluate-count-of-counts", USAGE),
    ("ecoc-epsilon-negative", "evaluate-count-of-counts --epsilon -1 --out res", USAGE),
    ("ecoc-epsilon-word", "evaluate-count-of-counts --epsilon abc --out res", USAGE),
    ("ecoc-n-groups-zero", "evaluate-count-of-counts --n-groups 0 --out res", USAGE),
    ("ecoc-states-zero", "evaluate-count-of-counts --states 0 --out res", USAGE),
    ("ecoc-counties-below-states", "evaluate-count-of-counts --states 5 --counties 2 --out res", USAGE),
    ("ecoc-max-size-zero", "evaluate-count-of-counts --max-size 0 --out res", USAGE),
    ("ecoc-strategies-unknown", "evaluate-count-of-counts --strategies nope --out res", USAGE),
    ("ecoc-strategies-empty", "evaluate-count-of-counts --strategies , --out res", USAGE),
    ("ecoc-strategies-long", f"evaluate-count-of-counts --strategies {LONG} --out res", USAGE),
    ("ecoc-runs-zero", "evaluate-count-of-counts --runs 0 --out res", USAGE),
    ("ecoc-seed-negative", "evaluate-count-of-counts --seed -1 --out res", USAGE),
    ("ecoc-dataset-unknown", "evaluate-count-of-counts --dataset nope --out res", USAGE),
    ("ecoc-entities-alone", "evaluate-count-of-counts --entities t/entities.csv --out res", USAGE),
    ("ecoc-out-under-a-file", "evaluate-count-of-counts --n-groups 100 --out s.csv/res", RUNTIME),
    ("ecoc-out-has-results", "evaluate-count-of-counts --n-groups 100 --out results", RUNTIME),
    ("ecoc-tables-junk", "evaluate-count-of-counts --entities junk.txt --groups junk.txt --hierarchy junk.txt "
     "--out res", RUNTIME),
    # -- evaluate ------------------------------------------------------------------------------
    ("evaluate-no-out", "evaluate", USAGE),
    ("evaluate-study-unknown", "evaluate --study nope --out res", USAGE),
    ("evaluate-rounds-zero", "evaluate --rounds 0 --out res", USAGE),
    ("evaluate-queries-zero", "evaluate --queries 0 --out res", USAGE),
    ("evaluate-hold-zero", "evaluate --hold 0 --out res", USAGE),
    ("evaluate-max-range-zero", "evaluate --max-range 0 --out res", USAGE),
    ("evaluate-rounds-word", "evaluate --rounds many --out res", USAGE),
    ("evaluate-epsilons-word", "evaluate --epsilons abc --out res", USAGE),
    ("evaluate-epsilons-empty", "evaluate --epsilons , --out res", USAGE),
    ("evaluate-epsilons-long", f"evaluate --epsilons {LONG} --out res", USAGE),
    ("evaluate-percentile-large", "evaluate --percentile 200 --out res", USAGE),
    ("evaluate-methods-unknown", "evaluate --methods nope --rounds 1 --out res", USAGE),
    ("evaluate-methods-long", f"evaluate --methods {LONG} --rounds 1 --out res", USAGE),
    ("evaluate-seed-word", "evaluate --seed x --out res", USAGE),
    ("evaluate-dataset-missing", "evaluate --dataset nope.csv --out res", RUNTIME),
    ("evaluate-dataset-junk", "evaluate --dataset junk.txt --out res", RUNTIME),
    ("evaluate-dataset-empty", "evaluate --dataset empty.txt --out res", RUNTIME),
    ("evaluate-dataset-long", "evaluate --dataset long.txt --out res", RUNTIME),
    ("evaluate-out-under-a-file", "evaluate --out s.csv/res", RUNTIME),
    ("evaluate-out-has-results", "evaluate --study hierarchy --out results", RUNTIME),
    # -- pak-improvement ---------------------------------------------------------------------
    ("pak-no-out", "pak-improvement", USAGE),
    ("pak-rounds-zero", "pak-improvement --rounds 0 --out res", USAGE),
    ("pak-rounds-word", "pak-improvement --rounds x --out res", USAGE),
    ("pak-epsilon-word", "pak-improvement --epsilon x --out res", USAGE),
    ("pak-seed-word", "pak-improvement --seed x --out res", USAGE),
    ("pak-dataset-missing", "pak-improvement --dataset nope.csv --out res", RUNTIME),
    ("pak-dataset-junk", "pak-improvement --dataset junk.txt --out res", RUNTIME),
    ("pak-out-under-a-file", "pak-improvement --out s.csv/res", RUNTIME),
    ("pak-out-has-results", "pak-improvement --out results", RUNTIME),
    # -- demo, topl-demo ------------------------------------------------------------------------
    ("demo-epsilon-word", "demo --epsilon x --out res", USAGE),
    ("demo-epsilon-negative", "demo --epsilon -1 --out res", USAGE),
    ("demo-epsilon-zero", "demo --epsilon 0 --out res", USAGE),
    ("demo-seed-word", "demo --seed x --out res", USAGE),
    ("demo-out-under-a-file", "demo --out s.csv/res", RUNTIME),
    ("demo-out-has-results", "demo --out results", RUNTIME),
    ("topl-demo-epsilon-negative", "topl-demo --epsilon -1 --out res", USAGE),
    ("topl-demo-epsilon-large", "topl-demo --epsilon 31 --out res", USAGE),
    ("topl-demo-threshold-epsilon-negative", "topl-demo --threshold-epsilon -1 --out res", USAGE),
    ("topl-demo-intervals-zero", "topl-demo --intervals 0 --out res", USAGE),
    ("topl-demo-intervals-word", "topl-demo --intervals x --out res", USAGE),
    ("topl-demo-out-under-a-file", "topl-demo --out s.csv/res", RUNTIME),
    # -- postprocess -----------------------------------------------------------------------------
    ("pp-no-transition", "postprocess noisy.csv --users 50 --epsilon 0.5 -o out.csv", USAGE),
    ("pp-no-users", "postprocess noisy.csv --transition T.csv --epsilon 0.5 -o out.csv", USAGE),
    ("pp-no-output", PP, USAGE),
    ("pp-users-word", "postprocess noisy.csv --transition T.csv --users x --epsilon 0.5 -o out.csv", USAGE),
    ("pp-users-zero", "postprocess noisy.csv --transition T.csv --users 0 --epsilon 0.5 -o out.csv", USAGE),
    ("pp-users-negative", "postprocess noisy.csv --transition T.csv --users -4 --epsilon 0.5 -o out.csv", USAGE),
    ("pp-epsilon-negative", "postprocess noisy.csv --transition T.csv --users 50 --epsilon -1 -o out.csv", USAGE),
    ("pp-epsilon-zero", "postprocess noisy.csv --transition T.csv --users 50 --epsilon 0 -o out.csv", USAGE),
    ("pp-epsilon-word", "postprocess noisy.csv --transition T.csv --users 50 --epsilon x -o out.csv", USAGE),
    ("pp-sensitivity-negative", f"{PP} --sensitivity -1 -o out.csv", USAGE),
    ("pp-method-unknown", f"{PP} --method nope -o out.csv", USAGE),
    ("pp-prior-unknown", f"{PP} --prior nope -o out.csv", USAGE),
    ("pp-form-unknown", f"{PP} --form nope -o out.csv", USAGE),
    ("pp-output-trailing-slash", f"{PP} -o newdir/", USAGE),
    ("pp-output-directory", f"{PP} -o adir --force", USAGE),
    ("pp-noisy-missing", "postprocess nope.csv --transition T.csv --users 50 --epsilon 0.5 -o out.csv", RUNTIME),
    ("pp-noisy-junk", "postprocess junk.txt --transition T.csv --users 50 --epsilon 0.5 -o out.csv", RUNTIME),
    ("pp-noisy-empty", "postprocess empty.txt --transition T.csv --users 50 --epsilon 0.5 -o out.csv", RUNTIME),
    ("pp-noisy-binary", "postprocess bin.dat --transition T.csv --users 50 --epsilon 0.5 -o out.csv", RUNTIME),
    ("pp-noisy-long", "postprocess long.txt --transition T.csv --users 50 --epsilon 0.5 -o out.csv", RUNTIME),
    ("pp-noisy-wrong-width", "postprocess two.csv --transition T.csv --users 50 --epsilon 0.5 -o out.csv", RUNTIME),
    ("pp-transition-junk", "postprocess noisy.csv --transition junk.txt --users 50 --epsilon 0.5 -o out.csv",
     RUNTIME),
    ("pp-transition-not-stochastic", "postprocess noisy.csv --transition badT.csv --users 50 --epsilon 0.5 "
     "-o out.csv", RUNTIME),
    ("pp-output-exists", f"{PP} -o old.txt", RUNTIME),
    ("pp-output-is-input", f"{PP} -o T.csv --force", RUNTIME),
    ("pp-output-no-directory", f"{PP} -o nodir/out.csv", RUNTIME),
    ("pp-output-dangling-link", f"{PP} -o dangling --force", RUNTIME),
    # -- evaluate-postprocess ------------------------------------------------------------------
    ("epp-no-out", "evaluate-postprocess", USAGE),
    ("epp-study-unknown", "evaluate-postprocess --study nope --out res", USAGE),
    ("epp-epsilons-word", "evaluate-postprocess --epsilons abc --out res", USAGE),
    ("epp-epsilons-negative", "evaluate-postprocess --epsilons -1 --out res", USAGE),
    ("epp-epsilons-long", f"evaluate-postprocess --epsilons {LONG} --out res", USAGE),
    ("epp-steps-grid-fraction", "evaluate-postprocess --steps-grid 2.5 --out res", USAGE),
    ("epp-levels-negative", "evaluate-postprocess --levels -1 --out res", USAGE),
    ("epp-correlation-epsilons-zero", "evaluate-postprocess --correlation-epsilons 0 --out res", USAGE),
    ("epp-users-zero", "evaluate-postprocess --users 0 --out res", USAGE),
    ("epp-steps-zero", "evaluate-postprocess --steps 0 --out res", USAGE),
    ("epp-rounds-zero", "evaluate-postprocess --rounds 0 --out res", USAGE),
    ("epp-epsilon-zero", "evaluate-postprocess --epsilon 0 --out res", USAGE),
    ("epp-seed-negative", "evaluate-postprocess --seed -1 --out res", USAGE),
    ("epp-out-under-a-file", "evaluate-postprocess --rounds 1 --out s.csv/res", RUNTIME),
    ("epp-out-has-results", "evaluate-postprocess --study epsilon --rounds 1 --out results", RUNTIME),
    # -- budget ---------------------------------------------------------------------------------
    ("budget-missing", "budget nope.json", RUNTIME),
    ("budget-missing-directory", "budget nodir/b.json", RUNTIME),
    ("budget-junk", "budget junk.txt", RUNTIME),
    ("budget-not-json", "budget bin.dat", RUNTIME),
    ("budget-damaged-store", "budget damaged.json", RUNTIME),
    ("budget-state-not-a-store", "budget pure.json --summary x.csv", USAGE),
    ("budget-directory", "budget adir", USAGE),
    ("budget-new-rho-negative", "budget new.json --new-rho -1", USAGE),
    ("budget-new-rho-zero", "budget new.json --new-rho 0", USAGE),
    ("budget-new-rho-nan", "budget new.json --new-rho nan", USAGE),
    ("budget-new-rho-inf", "budget new.json --new-rho inf", USAGE),
    ("budget-new-rho-word", "budget new.json --new-rho abc", USAGE),
    ("budget-new-epsilon-zero", "budget new.json --new-epsilon 0", USAGE),
    ("budget-new-epsilon-nan", "budget new.json --new-epsilon nan", USAGE),
    ("budget-new-both", "budget new.json --new-rho 1 --new-epsilon 1", USAGE),
    ("budget-new-exists", "budget old.txt --new-rho 1", USAGE),
    ("budget-new-no-directory", "budget nodir/b.json --new-rho 1", RUNTIME),
    ("budget-new-under-a-file", "budget s.csv/b.json --new-rho 1", RUNTIME),
    ("budget-new-directory", "budget adir --new-epsilon 1", USAGE),
    # -- the group ------------------------------------------------------------------------------
    ("group-unknown-command", "nope", USAGE),
    ("group-unknown-option", "--nope", USAGE),
    ("group-long-command", LONG, USAGE),
]


def _workspace(root: Path) -> None:
    """The small files every case may read or be refused to write."""
    values = np.random.default_rng(0).integers(0, 31, size=300)
    (root / "s.csv").write_text("value\n" + "\n".join(map(str, values)) + "\n")
    (root / "two.csv").write_text("a,b\n" + "".join(f"{i},{i + 1}\n" for i in range(80)))
    (root / "junk.txt").write_text("abc\n")
    (root / "empty.txt").write_text("")
    (root / "header.txt").write_text("value\n")
    (root / "neg.csv").write_text("1\n" * 60 + "-3\n" + "1\n" * 10)
    (root / "nan.csv").write_text("1\n" * 60 + "nan\n" + "1\n" * 10)
    (root / "inf.csv").write_text("1\n" * 60 + "inf\n" + "1\n" * 10)
    (root / "long.txt").write_text("x" * 100_000 + "\n")
    (root / "longfield.csv").write_text("value\n1\n" + "9" * 5000 + "\n")
    (root / "bin.dat").write_bytes(bytes(range(256)) * 40)
    (root / "bad.csv.gz").write_bytes(b"not gzip at all")
    (root / "old.txt").write_text("precious\n")
    (root / "adir").mkdir()
    (root / "adir" / "keep.txt").write_text("keep\n")
    (root / "dangling").symlink_to("nowhere")
    (root / "linkdir").symlink_to("adir")
    (root / "links.csv").symlink_to("s.csv")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(root / "sock"))
    server.close()
    write_tables(housing_data(300, n_states=2, n_counties=3, seed=1), root / "t")
    BudgetStore.create(root / "pure.json", epsilon=5.0)
    (root / "damaged.json").write_text('{"format": "dpstream-budget", "version": 1, "accounting": "pu')
    truth = simulate_counts(FIG3_MATRIX, users=50, steps=20, seed=1)
    np.savetxt(root / "noisy.csv", LaplaceCounts(epsilon=0.5, seed=2).release(truth), delimiter=",", fmt="%.17g")
    np.savetxt(root / "T.csv", FIG3_MATRIX, delimiter=",")
    np.savetxt(root / "badT.csv", FIG3_MATRIX * 0.5, delimiter=",")
    results = root / "results"
    results.mkdir()
    for name in ("count-of-counts-housing.csv", "hierarchy-pos.csv", "pak-improvement-pos.json",
                 "pos-moving-average.png", "postprocess-epsilon.csv"):
        (results / name).write_text("an earlier result\n")


def _snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry under ``root`` (hidden ones too): its kind and, for a file, a hash of its bytes."""
    entries = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            relative = str(path.relative_to(root))
            if path.is_symlink():
                entries[relative] = ("link", os.readlink(path))
            elif path.is_dir():
                entries[relative] = ("dir", "")
            elif path.is_file():
                entries[relative] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                entries[relative] = ("other", "")
    return entries


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang(f"the case took more than {CASE_SECONDS} s")


@pytest.fixture
def workspace(tmp_path):
    """A fresh workspace per case, so that a failing case cannot make the next ones fail."""
    _workspace(tmp_path)
    return tmp_path, _snapshot(tmp_path)


def test_the_sweep_is_large_enough():
    assert len(CASES) >= 150
    assert len({name for name, _, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("command", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input(workspace, monkeypatch, command, expected):
    root, before = workspace
    monkeypatch.chdir(root)
    args, stdin = shlex.split(command), None
    if args[-1].startswith("<"):
        stdin = (root / args.pop()[1:]).read_bytes()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        result = CliRunner().invoke(cli, args, input=stdin)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    stderr = result.stderr
    assert result.exc_info is not None and result.exc_info[0] is SystemExit, result.exc_info  # no traceback
    assert "Traceback" not in stderr
    assert result.exit_code == expected, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and stderr.rstrip("\n").splitlines()[-1] == errors[0], stderr
    assert "x" * 81 not in stderr and "9" * 81 not in stderr  # at most 80 characters of a value
    quoted = re.findall(r"(?<!\w)'([^'\n]*?)'(?!\w)", errors[0])  # quoted runs, paired left to right
    assert all(len(run) <= 80 for run in quoted), errors[0]
    assert _snapshot(root) == before  # nothing created, nothing left behind, no input changed
