"""Observing a campaign: its points' states from the store and the scheduler (state,
status, progress), estimates, traces, and the two commands that act on it (cancel,
ingest)."""
