"""The report's section of a study campaign's declared tables and figures (issue #46): every
table and figure the study publishes (conf/study/figures/<preset>.yaml), under the study's
own numbers (fig04, tab03, ...), each with its caption, the definition and where it stands in
the text, its units and notes, and the numbers behind it: what ``campaign figures`` writes as
files, drawn by the same loop (campaign.harvest.declared_run.drawn_items) from the same
points. An item the campaigns cannot give says why, as index.json does.

The usual sections stay beside it: they hold harvest's own tables (the numbers ``campaign
harvest`` prints), the failures and the provenance, which a reader of a study's campaign
needs as much. A figure is matplotlib's SVG (text as text, ids salted by the item's number,
no date: the same store gives the same bytes) in an ``<img>`` of a data: URL (the page's
CSP allows images from data: only), so its styles and ids stay its own.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import polars as pl

from campaign.report.html import esc, keyvalues, para, table


@dataclass
class ShownItem:
    """One declared item as the page shows it."""

    number: str
    kind: str  # figure or table
    caption: str
    definition: str
    source: str  # where it stands in the text: the section and its sentence, quoted
    units: str
    status: str  # made, or why not (declared.STATUS's keys)
    why: str = ""
    notes: list[str] = field(default_factory=list)
    data: Optional[pl.DataFrame] = None  # the numbers behind it (its CSV); None: not made
    svg: Optional[bytes] = None  # the figure as SVG; None for a table or an item not made


@dataclass
class StudyShown:
    """A study campaign's declared items, in the declaration's order."""

    study: str  # the preset's study.name
    text: str  # the study's text (its file)
    items: list[ShownItem]


def _svg(fig, number: str) -> bytes:
    """``fig`` as SVG bytes that depend on nothing but the figure (no date, ids salted by the
    item's number, text as ``<text>``)."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": f"campaign-report-{number}", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def study_shown(store: Any, campaigns: Sequence[dict], points: Sequence[dict],
                warnings: list[str]) -> Optional[StudyShown]:
    """The declared items of the study every completed point of ``campaigns`` was launched by
    (None: a campaign of no study, of a study nothing declares, or of several studies), drawn
    as ``campaign figures`` draws them; the warnings of reading them appended to ``warnings``."""
    from campaign.harvest.declared import for_text
    from campaign.harvest.declared_data import Harvest
    from campaign.harvest.declared_run import drawn_items
    from campaign.harvest.study_style import study_of

    study = for_text(study_of(points))
    if study is None:
        return None
    names = {((p.get("config") or {}).get("study") or {}).get("name") for p in points
             if p.get("state") == "completed" and isinstance(p.get("config"), dict)}
    twin = len(names) == 1 and study.twin is not None and names == {study.twin}
    harvest = Harvest(store, campaigns)
    items = []
    for item, status, why, drawn in drawn_items(harvest, study, twin):
        made = status == "made"
        items.append(ShownItem(
            item.number, item.kind, item.caption, item.definition, f"{item.source.where}: \"{item.source.quote}\"",
            item.units, status, why, list(drawn.notes) if drawn is not None else [],
            drawn.data if made else None, _svg(drawn.figure, item.number) if made and drawn.figure is not None else None))
    warnings += [w for w in harvest.warnings if w not in warnings]
    return StudyShown(study.study, study.text, items)


def _item(it: ShownItem) -> str:
    head = f"<h3 id=\"{esc(it.number)}\">{esc(it.number)}: {esc(it.caption)}</h3>"
    facts = [("definition", esc(it.definition)), ("source", esc(it.source))]
    if it.units:
        facts.append(("units", esc(it.units)))
    facts += [("note", esc(n)) for n in it.notes]
    if it.status != "made":
        return head + para(f"not made: {it.why}") + keyvalues(facts)
    body = ""
    if it.svg is not None:
        src = "data:image/svg+xml;base64," + base64.b64encode(it.svg).decode("ascii")
        body += (f"<figure data-figure=\"{esc(it.number)}\" style=\"display:block;width:auto\">"
                 f"<img src=\"{src}\" alt=\"{esc(it.number)}: {esc(it.caption)}\" style=\"max-width:100%;height:auto\">"
                 f"<figcaption>{esc(it.number)}: {esc(it.caption)}</figcaption></figure>")
    numbers = table(f"study-{it.number}", it.data) if it.data is not None else ""
    if it.svg is not None and numbers:
        numbers = f"<details><summary>the numbers behind {esc(it.number)}</summary>{numbers}</details>"
    return head + body + keyvalues(facts) + numbers


def study_section(shown: Optional[StudyShown]) -> str:
    """The section's HTML ("" for a campaign of no declared study)."""
    if shown is None:
        return ""
    made = sum(1 for it in shown.items if it.status == "made")
    intro = para(f"{shown.study} ({shown.text}): {made} of {len(shown.items)} declared tables and figures made "
                 f"from these points, under the study's own numbers (conf/study/figures/; campaign figures --out DIR "
                 f"writes them as files, with index.json)")
    index = "<p>" + " ".join(f"<a href=\"#{esc(it.number)}\">{esc(it.number)}</a>" for it in shown.items) + "</p>"
    return intro + index + "".join(_item(it) for it in shown.items)
