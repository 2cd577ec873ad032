"""The ingester: MQTT readings and health reports into `calibrated` and `health`.

Pipeline: `client` (paho wiring, batching, acks) -> `topics` + `payload` (pure decoding and
validation against shared.columns) -> `derive` (dew point, vapour pressure, VPD, sea-level
pressure) -> `writer` (one transaction per batch: rows, quarantine, dirty marks, devices).
"""
