"""campaign.common.bounded on its own: the nesting pre-scan's known answers, the size limit,
the parser's own failures as one line, gzip under a cap, and the store's deserializer."""

from __future__ import annotations

import gzip
import json
import time
import zlib

import pytest

from campaign.common.bounded import (MAX_DEPTH, BoundError, Unreadable, check, decompress_gzip, is_unreadable, loads,
                              stored, too_deep)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


# ---------------------------------------------------------------- too_deep

@pytest.mark.parametrize("text, max_depth, expect", [
    ("[[1]]", 2, False),  # exactly max_depth
    ("[[1]]", 1, True),  # max_depth + 1
    (nested(64), 64, False),
    (nested(65), 64, True),
    (deep_object(64), 64, False),
    (deep_object(65), 64, True),
    ('["[[[[", "{{{{"]', 1, False),  # brackets inside strings do not count
    ('["\\"[[[[", "]]]]\\""]', 1, False),  # an escaped quote does not end a string
    ('["\\\\", [[1]]]', 2, True),  # an escaped backslash does: the brackets after it count
    ('["\\\\", [[1]]]', 3, False),
    ('["\\\\\\"[[[[["]', 1, False),  # \\ then \" : still inside the string
    ("[" * 100, 64, True),  # unbalanced: never closed, nested all the same
    ("[1, [2], [3], [" + "[]," * 70, 64, False),  # truncated but shallow: the parser says what is wrong
    ("[}" * 70, 64, False),  # mismatched: each pair one level
    ("[{" * 40 + "}]" * 40, 64, True),  # either kind of bracket counts
])
def test_too_deep_known_answers(text, max_depth, expect):
    assert too_deep(text, max_depth) is expect
    assert too_deep(text.encode(), max_depth) is expect  # bytes read as text


def test_too_deep_agrees_with_the_parser_on_generated_json():
    import random

    rng = random.Random(30)

    def gen(d):
        if d == 0 or rng.random() < 0.3:
            return rng.choice([1, "x[", '\\"{', None, "\\", ']}\\\\"'])
        if rng.random() < 0.5:
            return [gen(d - 1) for _ in range(rng.randint(0, 3))]
        return {f"k{i}[\\": gen(d - 1) for i in range(rng.randint(0, 3))}

    def depth(o):
        if isinstance(o, (list, dict)):
            return 1 + max((depth(x) for x in (o.values() if isinstance(o, dict) else o)), default=0)
        return 0

    for _ in range(400):
        o = gen(rng.randint(1, 14))
        if rng.random() < 0.5:
            o = [o] + [[]] * 30  # past the quick count
        text, d = json.dumps(o), depth(o)
        for max_depth in range(16):
            assert too_deep(text, max_depth) is (d > max_depth), (text, max_depth, d)


def test_the_prescan_is_linear_in_the_text():
    """Many escaped quotes in an unterminated string made the old string pattern rescan
    the rest of the text from every quote (72 s for 160 kB); now: milliseconds."""
    text = "[" * 100 + '"' + '\\"' * 200_000
    start = time.perf_counter()
    with pytest.raises(BoundError):
        loads(text, "crafted")
    assert time.perf_counter() - start < 2.0


# ---------------------------------------------------------------- check / loads

def test_size_limit_counts_bytes_or_characters():
    check("x" * 10, "t", max_bytes=10)
    with pytest.raises(BoundError, match=r"^t: 11 characters, more than the 10 campaign reads$"):
        check("x" * 11, "t", max_bytes=10)
    with pytest.raises(BoundError, match=r"^t: 11 bytes, more than the 10 campaign reads$"):
        check(b"x" * 11, "t", max_bytes=10)


@pytest.mark.parametrize("text, message", [
    (nested(100_000), "JSON nested more than 64 levels deep"),
    (deep_object(5_000), "JSON nested more than 64 levels deep"),
    ("[1, 2", "not JSON (Expecting"),
    ("1" * 5000, "not JSON (Exceeds the limit (4300 digits)"),  # ValueError, not JSONDecodeError
    (b"\xff\xfe\x00", "not JSON"),
])
def test_loads_failures_are_one_line_bound_errors(text, message):
    with pytest.raises(BoundError) as err:
        loads(text, "stored config")
    assert str(err.value).startswith(f"stored config: {message}") and "\n" not in str(err.value)


def test_without_a_prescan_the_parsers_own_recursion_error_is_one_line():
    with pytest.raises(BoundError, match="^trace: JSON nested too deep for the parser"):
        loads(nested(100_000), "trace", max_depth=None)


def test_bytes_and_str_read_alike():
    doc = {"a": [1, {"b": "ü[{"}], "c": None}
    text = json.dumps(doc)
    assert loads(text) == loads(text.encode()) == loads(bytearray(text.encode())) == doc
    assert loads(json.dumps(doc).encode("utf-16")) == doc  # as json.loads detects it


# ---------------------------------------------------------------- gzip

def test_gzip_members_one_after_another_read_as_one():
    raw = gzip.compress(b'{"traceEvents": [') + gzip.compress(b"]}")
    assert bytes(decompress_gzip(raw, "t")) == b'{"traceEvents": []}' == gzip.decompress(raw)


def test_gzip_zero_padding_is_read_as_gzip_reads_it():
    raw = gzip.compress(b"[1]") + b"\0" * 512
    assert bytes(decompress_gzip(raw, "t")) == b"[1]" == gzip.decompress(raw)


@pytest.mark.parametrize("raw", [gzip.compress(b"[1, 2, 3]" * 100, mtime=0)[:-9], b"", b"\x1f\x8b"])
def test_truncated_gzip_is_damaged(raw):
    with pytest.raises(BoundError, match="^t: a damaged gzip file"):
        decompress_gzip(raw, "t")


def test_garbage_after_gzip_is_damaged():
    with pytest.raises(BoundError, match="^t: a damaged gzip file"):
        decompress_gzip(gzip.compress(b"[1]") + b"garbage", "t")


def test_gzip_cap_exactly_and_one_past():
    raw = gzip.compress(b"x" * 1000)
    assert len(decompress_gzip(raw, "t", max_bytes=1000)) == 1000
    with pytest.raises(BoundError, match=r"^t: expands to more than 999 bytes, more than campaign reads$"):
        decompress_gzip(raw, "t", max_bytes=999)


def test_a_gzip_bomb_stops_at_the_cap():
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(2**20)
    raw = b"".join(comp.compress(zeros) for _ in range(64)) + comp.flush()  # 64 MiB in ~64 kB
    with pytest.raises(BoundError, match="expands to more than 16,777,216 bytes"):
        decompress_gzip(raw, "bomb", max_bytes=16 * 2**20)


# ---------------------------------------------------------------- the store's deserializer

def test_stored_reads_json_and_hands_back_unreadable_values():
    assert stored('{"a": [1]}') == {"a": [1]}
    bad = stored(nested(100_000))
    assert is_unreadable(bad) and isinstance(bad, Unreadable) and not bad and bad == {}
    assert bad.reason == f"JSON nested more than {MAX_DEPTH} levels deep, deeper than campaign reads"
    assert (bad or {}).get("trainer") is None and list(bad) == []  # readers that default go on
    assert is_unreadable(stored("not json")) and not is_unreadable(stored("null"))


# ---------------------------------------------------------------- memory (issue #41, finding 8)


def test_elements_count_what_a_parser_can_make_strings_included():
    from campaign.common.bounded import elements, memory

    assert elements('{"a": [1, 2], "b": "x,y"}') == elements(b'{"a": [1, 2], "b": "x,y"}') == 7
    assert memory("[{},{}]") == 2 * 7 + 80 * 4


def test_a_value_past_its_elements_is_refused_before_it_is_parsed():
    with pytest.raises(BoundError, match=r"^x: 2,002 JSON elements, more than the 2,000 campaign reads$"):
        loads("[" + "{}," * 1000 + "{}]", "x", max_elements=2000)
    assert len(loads("[" + "{}," * 1000 + "{}]", "x")) == 1001


def test_a_commands_budget_is_spent_once_and_then_refuses(monkeypatch):
    from campaign.common.bounded import Budget

    monkeypatch.setenv("CAMPAIGN_TEST_BUDGET_MB", "0.001")  # 1,048 bytes
    budget = Budget("CAMPAIGN_TEST_BUDGET_MB", 1)
    assert loads("[1, 2]", "a", budget=budget) == [1, 2] and budget.spent == 2 * 6 + 80 * 2
    with pytest.raises(BoundError, match=r"^b: parsing it would pass the 0 MiB this command parses of stored "
                                         r"JSON \(CAMPAIGN_TEST_BUDGET_MB\)$"):
        loads("[" + "1," * 20 + "1]", "b", budget=budget)
    assert budget.spent == 172  # nothing spent on what was refused
    assert Budget("CAMPAIGN_UNSET_BUDGET_MB", 3).limit() == 3 * 2**20


def test_a_traces_parse_memory_and_its_knob(monkeypatch, tmp_path):
    from campaign_trace import TraceError
    from campaign_trace.load import max_memory, parse_memory, read_json

    assert parse_memory(b'{"a": [1]}') == 2 * 10 + 80 * 3
    assert parse_memory('{"a": "\u00e9"}'.encode()) == 2 * 4 * 11 + 80 * 2  # not ASCII: 4 bytes a character
    monkeypatch.setenv("CAMPAIGN_TRACE_MAX_MEMORY_MB", "2")
    assert max_memory() == 2 * 2**20
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + "{}," * 20000 + "{}]}")
    with pytest.raises(TraceError, match=r"parsing it would take up to 3 MiB, more than the 2 MiB campaign gives a "
                                         r"trace \(CAMPAIGN_TRACE_MAX_MEMORY_MB\)"):
        read_json(path)
    assert len(read_json(path, max_memory_bytes=2**30)["traceEvents"]) == 20001
    monkeypatch.setenv("CAMPAIGN_TRACE_MAX_MEMORY_MB", "lots")
    with pytest.raises(TraceError, match=r"^CAMPAIGN_TRACE_MAX_MEMORY_MB='lots': expected a positive number of MiB"):
        max_memory()
