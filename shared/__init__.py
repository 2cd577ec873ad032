"""The project's shared library: configuration, column registry, units, time windows, database helpers.

`ingest`, `aggregate` and `serve` never import one another; they meet here and in the database.
"""
