"""``campaign harvest``: the time-to-solution and throughput views, repeats statistics,
utilisation and breakdown, projections of sampled runs, the reference study's figures,
comparisons, exports and figures (docs/harvest.md). Aggregated in SQL, finished in polars."""

from campaign.harvest.utilisation import breakdown_table, utilisation_table
from campaign.harvest.views import scaling_table, throughput_table

__all__ = ["breakdown_table", "scaling_table", "throughput_table", "utilisation_table"]
