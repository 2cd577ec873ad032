#!/bin/sh
# deploy/mosquitto/container-entrypoint.sh: start mosquitto in the eclipse-mosquitto container of
# deploy/compose.yaml with the shipped template + durable.conf (the same files deploy/services.sh
# renders). Listens on all interfaces inside the container network; compose publishes it on the
# host's loopback only.
set -eu
D=/mosquitto/state
mkdir -p "$D/data"
sed -e 's|@BIND@|0.0.0.0|' -e 's|@PORT@|1883|' -e "s|@DIR@|$D|g" /sds/mosquitto.conf >"$D/mosquitto.conf"
printf '\n' >>"$D/mosquitto.conf"
cat /sds/durable.conf >>"$D/mosquitto.conf"
cp /sds/acl "$D/acl"
if [ ! -f "$D/passwd" ]; then
    mosquitto_passwd -c -b "$D/passwd" ingester "$SDS_MQTT_PASSWORD"
fi
chown -R mosquitto:mosquitto "$D"
chmod 600 "$D/passwd" "$D/acl"
exec mosquitto -c "$D/mosquitto.conf"
