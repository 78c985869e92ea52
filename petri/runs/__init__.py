"""Layer 3: the SQLite run store and the tidy CSV / Parquet export.

Runs at rest: the SQLite run store every finished event is committed to (:mod:`.store`)
and the tidy CSV / Parquet export with its JSON sidecar (:mod:`.export`).
"""
