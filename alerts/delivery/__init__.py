"""The deliverer (`python -m alerts.delivery`): sends alert events over the organisation's
channels (webhook, email, MQTT) at least once, from the outbox `alert_deliveries`.

docs/alerts.md "Channels", "Signatures", "Retries and disabling"; decisions in docs/decisions.md.
"""
