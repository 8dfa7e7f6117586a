"""The results store, host side: open (with the schema-version check), register
campaigns and points, record scheduler state, and read back for status/harvest."""

from campaign.store.store import Store, default_store_url, describe_url, find_campaign_noted, open_store

__all__ = ["Store", "default_store_url", "describe_url", "find_campaign_noted", "open_store"]
