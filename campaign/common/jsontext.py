"""JSON texts of a launch's point configs, made once per shared section, not once per point.

A launch's points share their config sections (``campaign.common.redact.redact_shared``
returns the same dict for every point with that section): their JSON differs only in
the top level (``results_dir``, ...). ``Texts`` makes a config's text from its sections'
texts, each worked out once BY IDENTITY and kept with a reference to its object (an id is
never reused while the memo lives), and gives, byte for byte, what ``json.dumps`` gives:

- ``canonical``: ``json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)``,
  what a signature covers (``campaign.common.signing.canonical``);
- ``stored``: ``json.dumps(doc)``, what SQLAlchemy stores in a JSON column
  (``Dumped`` carries it there: ``campaign_sql.engine.dump_json``).

A ``Texts`` lives for one call (``Store.register``): sections are read, never changed,
while it does. A dict with a key that is not a string (sorted before it becomes a
string) and any other value are dumped whole, as ``json.dumps`` would.
"""

from __future__ import annotations

import json
import operator
from json.encoder import encode_basestring_ascii
from typing import Any, Optional

__all__ = ["Texts", "scalar"]

_CANON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)
_PLAIN = json.JSONEncoder()  # json.dumps's own defaults (its cached encoder)
_SCALARS = (str, int, float, bool, type(None))  # written alike in both texts
_STR = {str}


def scalar(value: Any) -> str:
    """A value's canonical JSON: a string, an int, None, a bool made here (as both texts
    write them); anything else by the canonical encoder (a float: NaN, Infinity; a subclass;
    a container, with the canonical text's separators)."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return _CANON.encode(value)


class Texts:
    """Canonical and stored JSON texts of configs whose sections are shared (module docstring)."""

    def __init__(self) -> None:
        from campaign_sql.engine import Dumped  # the store's (signing imports this module, not SQLAlchemy)

        self._dumped = Dumped
        # id(value) -> its text, canonical and stored, of each section (and scalar) seen; the
        # values themselves are kept in _kept, so that no id is reused while the memo lives
        self._texts: dict[bool, dict[int, str]] = {True: {}, False: {}}
        self._kept: list[Any] = []
        # (canonical?, a dict's keys in order) -> (a getter of its values in the text's order,
        # the text's parts: the text before each value, a place for the value's, the closing brace)
        self._layouts: dict[tuple[bool, tuple], Optional[tuple[Any, list]]] = {}

    def canonical(self, doc: Any, levels: int = 2) -> str:
        """``doc``'s canonical text: its dicts ``levels`` deep are made here, their values
        looked up by identity."""
        return self._text(doc, levels, True)

    def stored(self, doc: Any, levels: int = 1) -> str:
        """``json.dumps(doc)`` (key order kept, SQLAlchemy's separators), made as ``canonical``."""
        return self._text(doc, levels, False)

    def stored_value(self, config: dict) -> Any:
        """``config`` (a dict) as a JSON column stores it: a ``Dumped`` with its text made
        here, equal to ``config``."""
        return self._dumped(config, self.stored(config))

    def _text(self, doc: Any, levels: int, canon: bool) -> str:
        if type(doc) is dict and levels > 0:
            return self._dict(doc, levels, canon)
        if levels > 0 and type(doc) is list:  # made here (a point's own overrides): not kept
            if set(map(type, doc)) <= _STR:  # strings only: written here (the encoder's set-up costs more)
                return "[" + ("," if canon else ", ").join(map(encode_basestring_ascii, doc)) + "]"
            return (_CANON if canon else _PLAIN).encode(doc)
        got = self._texts[canon].get(id(doc))
        return got if got is not None else self._keep(doc)[0 if canon else 1]

    def _dict(self, doc: dict, levels: int, canon: bool) -> str:
        """A dict's text from its values' texts, found by their ids (in C: a launch's configs
        have a score of keys, each written twice a point)."""
        layout_key = (canon, tuple(doc))
        layout = self._layouts.get(layout_key, False)
        if layout is False:
            layout = self._layouts[layout_key] = _layout(doc, canon)
        if layout is None:  # a key that is not a string: json's own order and conversion
            return (_CANON if canon else _PLAIN).encode(doc)
        values = layout[0](doc)
        texts = list(map(self._texts[canon].get, map(id, values)))
        i = -1
        while True:  # the values not seen yet (found in C)
            try:
                i = texts.index(None, i + 1)
            except ValueError:
                break
            texts[i] = self._text(values[i], levels - 1, canon)
        parts = layout[1][:]  # '{"key":', text, ',"key":', text, ..., '}'
        parts[1::2] = texts
        return "".join(parts)

    def _keep(self, value: Any) -> tuple[str, str]:
        """A value's texts, kept by its id (with the value)."""
        kind = type(value)
        if kind in _SCALARS:
            canon = plain = scalar(value)
        else:
            canon, plain = _CANON.encode(value), _PLAIN.encode(value)
        self._kept.append(value)
        self._texts[True][id(value)] = canon
        self._texts[False][id(value)] = plain
        return canon, plain


def _layout(doc: dict, canon: bool) -> Optional[tuple[Any, list]]:
    """A getter of ``doc``'s values in its text's order (always a tuple) and its text's
    parts, a place (``""``) for each value's; None when a key is not a string."""
    if not all(type(k) is str for k in doc):
        return None
    keys = sorted(doc) if canon else list(doc)
    item, colon = (",", ":") if canon else (", ", ": ")
    get = (lambda d: ()) if not keys else operator.itemgetter(*keys) if len(keys) > 1 else (lambda d: (d[keys[0]],))
    heads = [("{" if i == 0 else item) + encode_basestring_ascii(k) + colon for i, k in enumerate(keys)]
    parts = [""] * (2 * len(keys) + 1)  # each key's head, a place for its value's text, the closing brace
    parts[0::2] = heads + ["}" if keys else "{}"]
    return get, parts
