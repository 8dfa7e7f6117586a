"""The report's sections, each a function of the gathered data (campaign.report.data)
returning its HTML, or "" when the campaign has nothing for it (the page leaves it out).

Tables are harvest's (campaign.harvest.tables' registry, the columns its terminal table
shows: campaign.harvest.run._terminal); a table of points registered there that no
section below names (a model or plan table, say) gets its own section, titled from its
registry entry, so a new table appears in the report without touching this module.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

import polars as pl

from campaign.common.plan_origin import plan_of
from campaign.report.data import ReportData, gpu_hours_estimated, gpu_hours_used, resumable
from campaign.report.html import esc, figure, keyvalues, number, para, table, utc

SCALING_TABLES = ("scaling", "throughput", "placement")
TIME_TABLES = ("utilisation", "breakdown", "hardware")
NAMED = SCALING_TABLES + TIME_TABLES  # the tables the sections below place themselves
CAPTIONS = {
    "training_time": "time to solution T(N) with its interval; dashed: the ideal T(1)/N",
    "speedup": "speedup T(1)/T(N); dashed: ideal (= N)",
    "efficiency": "parallel efficiency speedup/N; dashed: ideal (= 1)",
    "throughput": "images/s per GPU; dashed: ideal (constant)",
    "placement": "the same GPU count on one node and over several",
    "utilisation": "GPU and CPU utilisation of the profiler window",
    "breakdown": "where an iteration's time goes: compute, communication (exposed, overlapped), data wait",
    "hardware": "model FLOPs utilisation and all-reduce bus bandwidth",
    "platform_comparison": "platforms side by side (another campaign's included when one is given)",
    "model": "time per image: measured (filled), the fitted t(N) (line, its interval shaded), predictions "
             "(hollow), the knee (dotted)",
}


def _shown(name: str, df: pl.DataFrame) -> pl.DataFrame:
    from campaign.harvest.run import _terminal

    return _terminal(name, df)


def _registered(name: str, tables: dict[str, pl.DataFrame]) -> str:
    from campaign.harvest.tables import TABLES

    df = tables.get(name)
    if df is None or df.height == 0:
        return ""
    return f"<h3>{esc(name)}</h3>{para(TABLES[name].title)}{table(name, _shown(name, df))}"


def _figures(names, svgs: dict[str, str]) -> str:
    return "".join(figure(n, svgs[n], CAPTIONS.get(n, n)) for n in names if n in svgs)


def summary(data: ReportData) -> str:
    """What was asked, what ran, the state of every point, GPU-hours, dates, id and name."""
    from campaign.observe.status import summary_line

    c, points = data.campaign, data.points
    sweep = c.get("overrides")
    sweep_text = " ".join(str(o) for o in sweep) if isinstance(sweep, list) else (str(sweep) if sweep else "")
    starts = [a["started_at"] for a in data.raw_attempts if a.get("started_at")]
    ends = [a["ended_at"] for a in data.raw_attempts if a.get("ended_at")]
    estimated, unknown = gpu_hours_estimated(points)
    missing = f" ({unknown} point(s) without an estimate)" if unknown and estimated is not None else ""
    est = number(estimated) + missing
    rows = [
        ("campaign", esc(c["id"])), ("name", esc(c.get("name") or "-")),
        ("the sweep", f"<code>{esc(sweep_text or '-')}</code>"),
    ] if not data.several else [(f"campaign {i + 1} of {len(data.campaigns)}", _one(x))
                                for i, x in enumerate(data.campaigns)]
    rows += [
        ("points", esc(summary_line(points)) if points else "0"),
        ("created", utc(c.get("created_at"))), ("first start", utc(min(starts, default=None))),
        ("last end", utc(max(ends, default=None))),
        ("GPU-hours estimated", esc(est) + " (the trainers' declarations, before anything ran)"),
        ("GPU-hours used", number(gpu_hours_used(data.attempts)) + " (every attempt's elapsed time x its GPUs)"),
    ]
    keys = ("campaign_id",) * data.several + ("idx", "platform", "trainer", "experiment", "gpus", "nodes", "repeat",
                                               "state", "attempts")
    states = pl.DataFrame([{k: p.get(k) for k in keys} for p in points])
    return keyvalues(rows) + "<h3>states per point</h3>" + table("states", states)


def _one(c: dict) -> str:
    """One of several campaigns read as one: its id, name and sweep."""
    sweep = c.get("overrides")
    sweep_text = " ".join(str(o) for o in sweep) if isinstance(sweep, list) else (str(sweep) if sweep else "")
    return f"{esc(c['id'])} ({esc(c.get('name') or '-')}) <code>{esc(sweep_text or '-')}</code>"


def scaling(data: ReportData, svgs: dict[str, str]) -> str:
    """Time to solution, throughput and placement tables and their figures."""
    tables = "".join(_registered(n, data.tables) for n in SCALING_TABLES)
    if not tables:
        return ""
    return tables + _figures(("training_time", "speedup", "efficiency", "throughput", "placement"), svgs)


def registered_sections(data: ReportData, svgs: Optional[dict[str, str]] = None) -> list[tuple[str, str, str]]:
    """(key, title, body) of every registered table of points no other section shows, with
    the figure of the same name when there is one (the model's)."""
    from campaign.harvest.tables import POINT_TABLES, TABLES

    out = []
    for name in POINT_TABLES:
        if name in NAMED:
            continue
        body = _registered(name, data.tables)
        if body:
            body += _figures((name,), svgs or {})
            out.append((f"table-{name}", TABLES[name].help, body))
    return out


def where_time_goes(data: ReportData, svgs: dict[str, str]) -> str:
    """Utilisation, the phase breakdown, MFU and memory."""
    tables = "".join(_registered(n, data.tables) for n in TIME_TABLES)
    return tables + _figures(("utilisation", "breakdown", "hardware"), svgs) if tables else ""


def comparison(data: ReportData, svgs: dict[str, str]) -> str:
    """The reference study's figures beside the measured ones, and other campaigns'."""
    parts = []
    for name, title, df in data.comparisons:
        if df.height:
            key = name if name in ("reference", "ideal") else "campaign"
            parts.append(f"<h3>{esc(name)}</h3>{para(title)}{table(key, _shown(key, df))}")
    if not parts:
        return ""
    return "".join(parts) + (_figures(("platform_comparison",), svgs) if data.other_tables else "")


def failures(data: ReportData) -> str:
    """Every point that did not complete (its reason and log), what a resume would rerun,
    and every attempt when some point ran more than once or did not complete."""
    from campaign.observe.status import failing_log

    rows = []
    for p in data.points:
        if p["state"] == "completed":
            continue
        log = p.get("log_path")
        rows.append({**({"campaign_id": p.get("campaign_id")} if data.several else {}), "idx": p["idx"], "platform": p["platform"], "trainer": p["trainer"], "gpus": p["gpus"],
                     "repeat": p["repeat"], "state": p["state"], "reason": p.get("reason"),
                     "log": failing_log(p.get("reason"), log) if log else None})
    many = any((p.get("attempts") or 0) > 1 for p in data.points)
    if not rows and not many:
        return ""
    out = ""
    if rows:
        cols = {**({"campaign_id": pl.Utf8} if data.several else {}), "idx": pl.Int64, "platform": pl.Utf8, "trainer": pl.Utf8, "gpus": pl.Int64, "repeat": pl.Int64,
                "state": pl.Utf8, "reason": pl.Utf8, "log": pl.Utf8}
        out += "<h3>points that did not complete</h3>" + table("failures", pl.DataFrame(rows, schema=cols))
        for c in data.campaigns or [data.campaign]:  # several read as one: each campaign resumes its own
            cid = c["id"]
            mine = [p for p in data.points if p.get("campaign_id", cid) == cid]
            if data.several and all(p["state"] == "completed" for p in mine):
                continue
            again = resumable(mine)
            out += para(f"campaign resume {cid} would rerun {len(again)} point(s)"
                        + (": " + ", ".join(f"#{p['idx']} ({p['state']})" for p in again) if again else "")
                        + f"; campaign resume {cid} --dry-run shows its plan")
    # started/ended: the attempts table's are local times; the summary's dates are UTC
    shown = [c for c in data.attempts.columns if c not in ("started", "ended")]
    out += "<h3>attempts</h3>" + table("attempts", data.attempts.select(shown))
    return out


PROVENANCE = (("python", "python"), ("torch", "torch"), ("CUDA", "cuda"), ("cuDNN", "cudnn"), ("device", "device"),
              ("backend", "backend"), ("git commit", "git_commit"))


def _distinct(values) -> str:
    seen = sorted({str(v) for v in values if v not in (None, "", [])})
    return ", ".join(seen)


def provenance(data: ReportData) -> str:
    """Versions, image digests, nodes, GPUs and the launch command, as the jobs recorded them."""
    c = data.campaign
    if data.several:  # several read as one: each campaign's launch, one line each
        c = {k: "; ".join(str(x.get(k) or "-") for x in data.campaigns) for k in ("command", "results_dir")}
        c["user"] = "; ".join(f"{x.get('user') or '-'} on {x.get('host') or '-'}" for x in data.campaigns)
    provs = [a.get("provenance") or {} for a in data.raw_attempts]
    provs = [p for p in provs if isinstance(p, dict)]
    rows = [("launch command", f"<code>{esc(c.get('command') or '-')}</code>"),
            ("launched by", esc(c["user"] if data.several else f"{c.get('user') or '-'} on {c.get('host') or '-'}")),
            ("results folder", esc(c.get("results_dir") or "-"))]
    plans = [plan_of(x) for x in (data.campaigns if data.several else [c])]
    if any(plans):  # campaign submit FILE: the saved plan each was sent from
        rows.insert(1, ("launched from plan", esc("; ".join(p or "-" for p in plans))))
    for label, key in PROVENANCE:
        text = _distinct(p.get(key) for p in provs)
        if text:
            rows.append((label, esc(text)))
    containers = [p.get("container") for p in provs if isinstance(p.get("container"), dict)]
    digests = _distinct(k.get("image_sha256") for k in containers)
    if digests:
        rows.append(("image sha256", esc(digests)))
        rows.append(("image", esc(_distinct(k.get("image") for k in containers))))
    nodes = set()
    for a in data.raw_attempts:
        p = a.get("provenance") if isinstance(a.get("provenance"), dict) else {}
        ranks = p.get("rank_nodes") if isinstance(p.get("rank_nodes"), list) else []  # stored JSON: any shape
        for n in [a.get("node_list"), p.get("slurm_nodelist"), p.get("host"), *ranks]:
            if n:
                nodes.add(str(n))
    if nodes:
        rows.append(("nodes", esc(", ".join(sorted(nodes)))))
    gpus = Counter(p["gpus"] for p in data.points)
    rows.append(("GPUs per point", esc(", ".join(f"{g} ({n} point(s))" for g, n in sorted(gpus.items())))))
    return keyvalues(rows)


def warnings(data: ReportData) -> Optional[str]:
    return ("".join(f"<p class=\"warn\">warning: {esc(w)}</p>" for w in data.warnings)
            + "".join(f"<p>note: {esc(n)}</p>" for n in data.notes))
