"""The results store's schema (``campaign_sql`` once installed).

``schema.py`` is the one definition (SQLAlchemy Core, portable to any SQLAlchemy
URL); ``schema.sql`` is its SQLite rendering for people and other tools, kept in
step by a test. Both the host (campaign.store) and the jobs (trainers.writer)
import the tables from here.
"""
