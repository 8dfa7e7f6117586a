"""``campaign figures``' body: every declared table and figure (declared.py) of the campaigns'
study, under the study's own numbering, each with the data behind it and its caption, and an
``index.json`` saying of every declared item whether it was made and, if not, why.

Per made item, in ``--out DIR``: ``<number>.png`` and ``.svg`` (a figure), ``<number>.csv`` (the
numbers behind it, in the units as published) and ``<number>.txt`` (its caption: the text's
caption, the definition and where it stands in the text, the units, the campaigns, notes).
``index.json``: one entry per declared item (``number``, ``kind``, ``caption``, ``definition``,
``source``, ``units``, ``files``, ``status``: made, no_points, no_numbers, outside_grid or
not_measured, ``why`` and ``notes``). A campaign of no study gets harvest's usual figures and an
index of them. Without ``--out`` the index is printed and nothing is written.

Several campaigns (ids, names: every campaign of a name) make one set, when they share one
study; colliding points: the newer attempt wins (campaign.harvest.several.newest_wins). Every file is
written through campaign.common.outfile (a possibly shared folder); the store is only read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterator, Optional, Sequence

from campaign.common.errors import ConfigError
from campaign.common.outfile import check_output, write_output
from campaign.common.text import printable
from campaign.harvest.declared import STATUS, Item, StudyFigures, for_text
from campaign.harvest.several import resolve_campaigns

FLAG = "--out"
FORMATS = ("png", "svg")  # a figure's image files (--formats); none: the data and captions only


def study_points(store, campaigns: Sequence[dict]) -> tuple[Optional[str], Optional[str], list[str]]:
    """(the study text the campaigns' completed points share, or None; their study.name where
    they share one; warnings). Campaigns of two studies are refused in one line."""
    from campaign.harvest.study_style import study_of
    from campaign.observe.state import effective_points

    texts, names, warnings = {}, set(), []
    for c in campaigns:
        points, more = effective_points(store, c)
        warnings += more
        texts[c["id"]] = study_of(points)
        for p in points:
            config = p.get("config")
            if p.get("state") == "completed" and isinstance(config, dict):
                names.add(((config.get("study") or {}).get("name")))
    if len(set(texts.values())) > 1:
        said = ", ".join(f"{cid}: {t or 'no study'}" for cid, t in texts.items())
        raise ConfigError(f"these campaigns are of different studies ({said}); give campaigns of one study")
    text = next(iter(texts.values()), None)
    return text, (next(iter(names)) if len(names) == 1 else None), warnings


def caption_text(item: Item, campaigns: Sequence[dict], notes: Sequence[str]) -> str:
    """An item's caption file: the text's caption, the definition and its source line."""
    lines = [f"{item.number}: {item.caption}", f"definition: {item.definition}",
             f"source: {item.source.where}: \"{item.source.quote}\""]
    if item.units:
        lines.append(f"units: {item.units}")
    lines.append("campaigns: " + ", ".join(c["id"] + (f" ({c['name']})" if c.get("name") else "") for c in campaigns))
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines) + "\n"


def entry(item: Item, status: str, why: str = "", files: Sequence[str] = (), notes: Sequence[str] = ()) -> dict:
    """One index.json entry."""
    return {"number": item.number, "kind": item.kind, "caption": item.caption, "definition": item.definition,
            "source": {"where": item.source.where, "quote": item.source.quote}, "units": item.units,
            "files": list(files), "status": status, "why": why or (STATUS[status] if status != "made" else ""),
            "notes": list(notes)}


def _write_text(path: Path, text: str) -> None:
    write_output(path, lambda fh: fh.write(text.encode()), flag=FLAG)


def _save(fig, out: Path, stem: str, formats: Sequence[str]) -> list[str]:
    """``out/<stem>.<format>`` for each format, written as campaign.common.outfile writes a file."""
    paths = [check_output(out / f"{stem}.{ext}", FLAG) for ext in formats]
    for path in paths:
        ext = path.suffix[1:]
        write_output(path, lambda fh, ext=ext: fig.savefig(fh, format=ext, dpi=120 if ext == "png" else None),
                     flag=FLAG)
    return [p.name for p in paths]


def _write_item(out: Path, item: Item, drawn, campaigns: Sequence[dict], label: Optional[str],
                formats: Sequence[str]) -> list[str]:
    """The item's files in ``out``: its figure (``formats``), CSV and caption."""
    from campaign.harvest.export import file_bytes
    from campaign.harvest.figure import pyplot, stamp

    files = []
    if drawn.figure is not None:
        try:
            if formats:
                stamp(drawn.figure, label)
                files += _save(drawn.figure, out, item.number, formats)
        finally:
            pyplot().close(drawn.figure)
    csv = out / f"{item.number}.csv"
    write_output(csv, file_bytes(drawn.data, "csv"), flag=FLAG)
    files.append(csv.name)
    _write_text(out / f"{item.number}.txt", caption_text(item, campaigns, drawn.notes))
    files.append(f"{item.number}.txt")
    return files


def _label(campaigns: Sequence[dict]) -> Optional[str]:
    from campaign.harvest.figure import campaign_label

    return "; ".join(filter(None, (campaign_label(c) for c in campaigns))) or None


def drawn_items(harvest, study: StudyFigures, twin: bool) -> Iterator[tuple[Item, str, str, Optional[object]]]:
    """Every declared item of ``study`` drawn from ``harvest`` (declared_data.Harvest), in the
    declaration's order: (item, status: made or why not, the why, what declared_draw.item_data
    drew: None for an item the declaration leaves unmade). A drawn figure is open while its
    item is being handled and closed before the next is drawn (one figure open at a time):
    ``campaign figures`` and ``campaign report`` draw with this one loop."""
    from campaign.harvest.declared_draw import item_data
    from campaign.harvest.figure import pyplot

    for item in study.items:
        if item.unmade is not None:
            yield item, item.unmade.status, f"{STATUS[item.unmade.status]}: {item.unmade.why}", None
            continue
        drawn = item_data(item, harvest, twin)
        try:
            if drawn.missing:
                yield item, "no_points", f"{STATUS['no_points']}: {drawn.missing}", drawn
            else:
                yield item, "made", "", drawn
        finally:
            if drawn.figure is not None:
                pyplot().close(drawn.figure)


def declared_index(store, campaigns: Sequence[dict], study: StudyFigures, twin: bool,
                   out: Optional[Path], formats: Sequence[str] = FORMATS) -> list[dict]:
    """Every declared item of ``study`` drawn from ``campaigns`` (into ``out`` when given)."""
    from campaign.harvest.declared_data import Harvest

    harvest = Harvest(store, campaigns)
    label = _label(campaigns)
    index = []
    for item, status, why, drawn in drawn_items(harvest, study, twin):
        if status != "made":
            index.append(entry(item, status, why, notes=drawn.notes if drawn is not None else ()))
            continue
        files = _write_item(out, item, drawn, campaigns, label, formats) if out is not None else []
        index.append(entry(item, "made", files=files, notes=drawn.notes))
    for w in harvest.warnings:
        print(f"warning: {printable(w)}", file=sys.stderr)
    return index


def usual_index(store, campaigns: Sequence[dict], out: Optional[Path]) -> tuple[list[dict], bool]:
    """A campaign of no study: harvest's usual figures (figures.write_figures), one entry each
    (none listed without ``out``), and whether it has completed points to draw from."""
    from campaign.harvest.declared_data import Harvest
    from campaign.harvest.figures import write_figures

    tables, _ = Harvest(store, campaigns).tables({})
    if not tables or out is None:
        return [], bool(tables)
    paths = write_figures(out, tables["scaling"], tables["throughput"], tables["utilisation"],
                          stack=tables["phase_stack"], campaign=campaigns[0] if len(campaigns) == 1 else None)
    stems = list(dict.fromkeys(p.stem for p in paths))
    return [{"number": s, "kind": "figure", "caption": s.replace("_", " "), "definition": "campaign's own (docs/harvest.md)",
             "source": None, "units": "", "files": [p.name for p in paths if p.stem == s], "status": "made", "why": "",
             "notes": []} for s in stems], True


def parse_formats(text: Optional[str]) -> tuple[str, ...]:
    """``--formats png,svg`` (the default), ``png``, ``svg`` or ``none`` (the data only)."""
    if text is None:
        return FORMATS
    words = [w.strip() for w in text.split(",") if w.strip()]
    if words == ["none"]:
        return ()
    if not words or any(w not in FORMATS for w in words):
        raise ConfigError(f"--formats {text!r}: give {', '.join(FORMATS)} (comma-separated) or none")
    return tuple(dict.fromkeys(words))


def figures(refs: Sequence[str], *, store_url: str, out: Optional[str] = None, formats: Optional[str] = None) -> int:
    """Write (``out``) or list every declared table and figure of the campaigns' study
    (``formats``: the figures' image files, parse_formats). Returns 0, or 1 when the
    campaigns have no completed point to draw from."""
    from campaign.store import open_store

    kinds = parse_formats(formats)
    target = None
    if out is not None:
        target = Path(out)
        if target.exists() and not target.is_dir():
            raise ConfigError(f"--out {out}: not a folder; give a folder for the figures (created when missing)")
    with open_store(store_url, readonly=True) as store:
        campaigns = resolve_campaigns(store, refs)
        text, name, warnings = study_points(store, campaigns)
        for w in warnings:
            print(f"warning: {printable(w)}", file=sys.stderr)
        study = for_text(text)
        if target is not None:
            try:
                target.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot write figures to {target}: {exc.strerror}") from exc
        if study is None:
            index, drawable = usual_index(store, campaigns, target)
        else:
            index = declared_index(store, campaigns, study, twin=name is not None and name == study.twin, out=target,
                                   formats=kinds)
            drawable = any(e["status"] == "made" for e in index)
    if target is not None:
        _write_text(target / "index.json", json.dumps(
            {"study": study.study if study else None, "text": study.text if study else None,
             "campaigns": [c["id"] for c in campaigns], "items": index}, indent=2) + "\n")
        print(printable(f"wrote {target / 'index.json'}"), file=sys.stderr)
    for e in index:
        print(printable(f"{e['number']:<7} {e['status']:<13} {' '.join(e['files']) or e['why']}"))
    if not drawable:
        ids = ", ".join(c["id"] for c in campaigns)
        print(printable(f"campaign {ids}: nothing to draw (no completed point its items read; campaign status)"),
              file=sys.stderr)
        return 1
    return 0
