"""``campaign report``: one self-contained HTML page of a campaign (or of several read as one:
campaign.harvest.several; a study campaign's declared figures first: campaign.report.study).

Everything is in the file: styles inline, figures as inline SVG (campaign.report.svg, drawn
without matplotlib: text as ``<text>`` in a generic font family),
no script, font or image fetched; a Content-Security-Policy meta tag says so to the
browser (``default-src 'none'``), so the page opens from a file on a machine with no
network and a stray reference would be refused, not fetched. The numbers are harvest's
(campaign.report.data builds them with harvest's code), store text is escaped
(campaign.report.html.esc), dates are UTC: the same store gives the same bytes whatever
the machine's locale and time zone. Reads the store, never writes it.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from campaign.common.outfile import check_output, write_output
from campaign.common.text import printable
from campaign.report import sections
from campaign.report.data import ReportData
from campaign.report.html import esc, section, utc

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1b1f24;margin:0 auto;
max-width:1200px;padding:1em 1.5em}
h1{font-size:1.5em;margin:.2em 0}h2{border-bottom:2px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
h3{font-size:1.05em;margin:1.2em 0 .3em}nav a{margin-right:1em}
dl.kv{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dl.kv dt{font-weight:600}dl.kv dd{margin:0}
code{font:12px ui-monospace,monospace;word-break:break-all}
.scroll{overflow-x:auto}table{border-collapse:collapse;font:12px ui-monospace,monospace;margin:.4em 0}
th,td{border:1px solid #d0d7de;padding:2px 6px;text-align:right;white-space:nowrap}
th{background:#f6f8fa;position:sticky;top:0}tbody tr:nth-child(even){background:#fafbfc}
figure{display:inline-block;margin:.5em 1em .5em 0;vertical-align:top;width:calc(50% - 1.2em);min-width:320px}
figure svg{width:100%;height:auto}figcaption{font-size:12px;color:#57606a}
.warn{color:#9a6700}
@media print{body{max-width:none;padding:0}nav{display:none}section{break-inside:auto}
figure,tr{break-inside:avoid}.scroll{overflow:visible}th{position:static}}
"""
TITLES = {
    "summary": "Summary", "study": "The study's figures", "scaling": "Scaling", "time": "Where the time goes",
    "comparison": "Comparison", "failures": "Failures and attempts", "provenance": "Provenance",
}


def render_page(data: ReportData, svgs: dict[str, str]) -> str:
    """The page's HTML (a pure function of the gathered data and its figures)."""
    from campaign.report.study import study_section

    c = data.campaign
    parts = [("summary", TITLES["summary"], sections.summary(data)),
             ("study", TITLES["study"], study_section(data.study)),
             ("scaling", TITLES["scaling"], sections.scaling(data, svgs)),
             *sections.registered_sections(data, svgs),
             ("time", TITLES["time"], sections.where_time_goes(data, svgs)),
             ("comparison", TITLES["comparison"], sections.comparison(data, svgs)),
             ("failures", TITLES["failures"], sections.failures(data)),
             ("provenance", TITLES["provenance"], sections.provenance(data))]
    present = [(k, t, b) for k, t, b in parts if b]
    nav = " ".join(f"<a href=\"#{esc(k)}\">{esc(t)}</a>" for k, t, _ in present)
    name = c.get("name") or c["id"]
    said = f"campaign {esc(c['id'])} &middot; created {utc(c.get('created_at'))}"
    if data.several:  # several read as one: each named, the first date to the last
        cs = data.campaigns
        name = ", ".join(dict.fromkeys(x.get("name") or x["id"] for x in cs))
        said = (f"campaigns {esc(', '.join(x['id'] for x in cs))} (read as one) &middot; created "
                f"{utc(cs[0].get('created_at'))} to {utc(cs[-1].get('created_at'))}")
    head = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
            f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\n"
            f"<title>campaign report: {esc(name)}</title>\n<style>{STYLE}</style></head>\n<body>\n")
    top = (f"<header><h1>{esc(name)}</h1><p>{said}</p>"
           f"<nav>{nav}</nav>{sections.warnings(data)}</header>\n")
    return head + top + "".join(section(k, t, b) for k, t, b in present) + "</body></html>\n"


def build_report(store_url: str, refs: Sequence[str] = (), compare: Sequence[str] = ()
                 ) -> tuple[str, list[str], list[str]]:
    """The report of the campaigns ``refs`` (default: the latest; several, or a name several
    share: read as one), compared with the campaigns ``compare``; returns the page and the
    warnings of deriving its points' states and the notes of points several campaigns' newer
    attempts left out."""
    from campaign.report.data import gather
    from campaign.report.svg import harvest_figures
    from campaign.store import open_store

    refs = list(refs)
    with open_store(store_url, readonly=True) as store:
        data = gather(store, refs, list(compare))
    other = next(iter(data.other_tables.values()), None)
    from campaign.harvest.study_style import style_of

    return render_page(data, harvest_figures(data.tables, other, style_of(data.points))), data.warnings, data.notes


def write_report(store_url: str, refs: Sequence[str] = (), out: Optional[str] = None,
                 compare: Sequence[str] = ()) -> int:
    """``campaign report``: the page to ``out`` (a file, made with its folder) or standard output."""
    if out is not None:
        check_output(out)  # never over a results store (campaign.common.outfile): before the store is read
    page, warnings, notes = build_report(store_url, refs, compare)
    for w in warnings:
        print(f"warning: {printable(w)}", file=sys.stderr)
    for note in notes:  # several campaigns: the points a newer attempt left out (on the page too)
        print(printable(f"note: {note}"), file=sys.stderr)
    if out is None:
        sys.stdout.flush()  # bytes, not the locale's encoding: the same page under any LC_ALL
        sys.stdout.buffer.write(page.encode("utf-8"))
        sys.stdout.buffer.flush()
        return 0
    # never through a link nor into a FIFO, never over a store (campaign.common.outfile)
    path = write_output(out, page.encode("utf-8"), hint="; give another --out FILE")
    print(printable(f"wrote {path}"), file=sys.stderr)
    return 0
