"""The points harvest reads of a campaign: those whose effective state is completed (as
``campaign status`` shows them), narrowed by ``--where``, less those whose rows harvest's
SQL cannot read. One campaign's (``completed_where``); several campaigns' filter is
campaign.harvest.several's ``completed_over``, which calls it for each."""

from __future__ import annotations

from typing import Optional

from campaign.harvest.query import POINT_IDS


def completed_where(store, campaign: dict, where: Optional[dict]) -> tuple[dict, list[dict], list[str]]:
    """``where`` narrowed to the campaign's points whose effective state is completed
    (campaign.observe.state, as campaign status shows them), with the points and warnings."""
    from campaign.observe.state import completed_ids, effective_points

    from campaign.store.typed import LEFT_OUT

    from campaign.harvest.door import left_out
    from campaign.harvest.where_settings import matching_ids, split

    points, warnings = effective_points(store, campaign)
    done = completed_ids(points)
    harvested = set(done)
    unread = left_out(store, campaign["id"], [p for p in points if p["id"] in harvested])
    if unread:  # rows harvest's SQL cannot read (JSON too long, a number that is none): said, and left out
        done = [i for i in done if i not in unread]
        warnings = warnings + list(unread.values())
    out, settings = split(where)
    if settings:  # --where on a setting (trainer.params.backbone=...): the points that have it
        chosen = matching_ids(points, settings, campaign["id"])
        done = [i for i in done if i in chosen]
        out[POINT_IDS] = done
    # all completed, none left out at the door (the usual case): no id list to bind
    elif len(done) < len(points) or any(w.endswith(LEFT_OUT) for w in warnings):
        out[POINT_IDS] = done
    return out, points, warnings
