"""The project's shared library: configuration, column registry, units, time windows, database.

`ingest`, `aggregate` and `serve` never import one another; they meet here and in the database.
"""
