"""Harvest's figures as inline SVG text, the same bytes on every machine.

The figures are harvest's own (campaign.harvest.plots and plots_bars, drawn from the
same tables). Three things make their SVG text a pure function of the data: no date
in its metadata, a fixed salt for the ids matplotlib hashes (``svg.hashsalt``; random
otherwise), and text drawn as paths (``svg.fonttype = path``: no font is looked up by
the browser, none is fetched). The XML prolog and DOCTYPE are dropped: the element is
embedded in HTML.
"""

from __future__ import annotations

import io
from typing import Optional

import polars as pl

SALT = "campaign-report"  # any fixed text: ids repeat between runs, unique within a figure


def figure_svg(fig) -> str:
    """One matplotlib figure as an ``<svg>`` element (closes the figure)."""
    import matplotlib
    from matplotlib import pyplot as plt

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": SALT, "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):].strip()


def harvest_figures(tables: dict[str, pl.DataFrame], other: Optional[dict[str, pl.DataFrame]] = None) -> dict[str, str]:
    """Figure name -> SVG element for every figure harvest --plots draws from these tables
    (campaign.harvest.figures.write_figures' list, without the campaign label: the page
    says whose they are)."""
    from campaign.harvest.figure import pyplot
    from campaign.harvest.plots import (efficiency_figure, platform_comparison_figure, speedup_figure,
                                        throughput_figure, time_figure, utilisation_figure)
    from campaign.harvest.plots_bars import breakdown_figure, hardware_figure, placement_figure

    if not tables:
        return {}
    pyplot()  # the Agg backend before any figure
    scaling, util = tables["scaling"], tables["utilisation"]
    both_scaling, both_util = scaling, util
    if other and other.get("scaling") is not None and other["scaling"].height:
        both_scaling = pl.concat([scaling, other["scaling"]], how="diagonal_relaxed")
        both_util = pl.concat([util, other["utilisation"]], how="diagonal_relaxed")
    stack, hardware, placement = tables.get("phase_stack"), tables.get("hardware"), tables.get("placement")
    figures = {
        "training_time": time_figure(scaling),
        "speedup": speedup_figure(scaling),
        "efficiency": efficiency_figure(scaling),
        "throughput": throughput_figure(tables["throughput"]),
        "utilisation": utilisation_figure(util),
        "platform_comparison": platform_comparison_figure(both_scaling, both_util),
        "breakdown": breakdown_figure(stack) if stack is not None else None,
        "hardware": hardware_figure(hardware) if hardware is not None and hardware.height else None,
        "placement": placement_figure(placement) if placement is not None and placement.height else None,
    }
    return {name: figure_svg(fig) for name, fig in figures.items() if fig is not None}
