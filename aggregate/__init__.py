"""The aggregate process: rollups of 5-minute readings into hourly, local-hourly and daily
tables with FAO-56 evapotranspiration, run by a single-leader UTC scheduler (`python -m
aggregate`) and operated with `sds aggregate run|backfill|status`."""
