"""``campaign harvest``: derive speedup, parallel efficiency and throughput from
the store (aggregated in SQL, finished in polars), and export them."""

from campaign.harvest.derive import scaling_table

__all__ = ["scaling_table"]
