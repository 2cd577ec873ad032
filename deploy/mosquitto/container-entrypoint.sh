#!/bin/sh
# deploy/mosquitto/container-entrypoint.sh: start mosquitto in the eclipse-mosquitto container of
# deploy/compose.yaml with the shipped template + durable.conf (the same files deploy/services.sh
# renders). Listens on all interfaces inside the container network; compose publishes it on the
# host's loopback only.
set -eu
D=/mosquitto/state
mkdir -p "$D/data"
sed -e 's|@BIND@|0.0.0.0|' -e 's|@PORT@|1883|' -e "s|@DIR@|$D|g" /sds/mosquitto.conf >"$D/mosquitto.conf"
# The upstream image has neither the project's broker patches nor its plugin (deploy/setup.sh
# builds both on a host): without the plugin file, drop its line rather than fail to start, and
# say so (docs/security.md: devices may subscribe to nothing; no retained message is kept).
plugin=$(sed -n 's/^plugin //p' "$D/mosquitto.conf")
if [ -n "$plugin" ] && [ ! -f "$plugin" ]; then
    echo "warning: $plugin not in this image: device SUBSCRIBEs are NOT refused and retained messages are NOT stripped" >&2
    sed -i '/^plugin /d' "$D/mosquitto.conf"
fi
printf '\n' >>"$D/mosquitto.conf"
cat /sds/durable.conf >>"$D/mosquitto.conf"
cp /sds/acl "$D/acl"
if [ ! -f "$D/passwd" ]; then
    mosquitto_passwd -c -b "$D/passwd" ingester "$SDS_MQTT_PASSWORD"
fi
chown -R mosquitto:mosquitto "$D"
chmod 600 "$D/passwd" "$D/acl"
exec mosquitto -c "$D/mosquitto.conf"
