"""Settings from SDS_* variables."""

from __future__ import annotations

import pytest

from shared.config import Settings, documented


def test_defaults_without_environment() -> None:
    s = Settings.from_env({})
    assert s.mqtt_port == 1883 and s.apikey_query_enabled is False


def test_values_parsed_by_type() -> None:
    s = Settings.from_env({"SDS_MQTT_PORT": "1884", "SDS_APIKEY_QUERY_ENABLED": "true",
                           "SDS_INGEST_FLUSH_INTERVAL": "0.5", "SDS_MQTT_TLS_CA": "",
                           "UNRELATED": "x"})
    assert (s.mqtt_port, s.apikey_query_enabled, s.ingest_flush_interval) == (1884, True, 0.5)
    assert s.mqtt_tls_ca is None


def test_bad_value_names_the_variable() -> None:
    with pytest.raises(ValueError, match="SDS_MQTT_PORT"):
        Settings.from_env({"SDS_MQTT_PORT": "many"})


def test_repr_hides_secrets() -> None:
    s = Settings(database_url="postgresql://u:hunter22@h/db", mqtt_password="s3cret-pw")
    text = repr(s)
    assert "hunter22" not in text and "s3cret-pw" not in text and "mqtt_port=1883" in text


def test_every_setting_is_documented() -> None:
    for var, _default, doc, _secret in documented():
        assert var.startswith("SDS_") and doc
