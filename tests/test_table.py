"""campaign.common.table: tabulate's tables, its number parsing left out of text columns
only, so the same bytes come out (the known answer is tabulate's own output)."""

from __future__ import annotations

import random

import pytest
from tabulate import tabulate

from campaign.common import table as tables

# cells tabulate reads as numbers, as text, or as neither (empty, None), and the odd ones:
# thousands separators, underscores, terminal escapes around a number, "True", "inf"
CELLS = ["1,000", "1,0000", "True", "False", "", None, "1e5", "\x1b[31m42\x1b[0m", "inf", "nan", 3, 2.5, 0, -1.25e-9,
         True, "#3", "job 12", "1234_5", "1_000", " 7 ", "-", "0x1f", "abc", "12 s", "1.", ".5", "+3", "waiting for room"]


def test_a_column_is_text_once_one_cell_surely_is():
    rows = [["#1", 2, "1,000", "", "job 12_3", "True"],
            ["#2", 3, "1,001", None, "1234_5", "False"]]
    # '#1' and 'job 12_3' are text; numbers, numbers with separators, empties, booleans are not
    assert tables.text_columns(rows) == [0, 4]
    assert tables.text_columns([]) == []
    assert tables.text_columns([["a"], ["b", "c"]]) == [0, 1]  # ragged rows: each column on its own


@pytest.mark.parametrize("fmt", ["simple", "github", "plain"])
def test_the_same_table_as_tabulate_byte_for_byte(fmt):
    rng = random.Random(fmt)
    for _ in range(400):
        ncol, nrow = rng.randint(1, 5), rng.randint(1, 6)
        rows = [[rng.choice(CELLS) for _ in range(ncol)] for _ in range(nrow)]
        headers = [f"h{j}" for j in range(ncol)]
        assert tables.render(rows, headers=headers, tablefmt=fmt) == tabulate(rows, headers=headers, tablefmt=fmt), rows


def test_a_status_like_table_is_unchanged():
    rows = [[f"#{i}", "a100_nvlink_40", 2, "sleep", "failed", "NODE_FAIL on n1", f"job {1000 + i}_{i % 7}"]
            for i in range(300)]
    headers = ["point", "platform", "gpus", "trainer", "was", "why", "now"]
    assert tables.render(rows, headers=headers) == tabulate(rows, headers=headers, tablefmt="simple")
