#!/usr/bin/env bash
# deploy/mosquitto/build-deb.sh: build mosquitto from Debian trixie's source package with the
# patches in deploy/mosquitto/patches, and install the resulting Debian packages. Run by
# deploy/setup.sh (as root, with the trixie deb-src entry in place and service starts forbidden)
# inside an empty directory apt can write to; not meant to be run by hand.
# Usage: build-deb.sh BUILD_DIR UPSTREAM_VERSION LOCAL_SUFFIX
set -euo pipefail

build_dir=$1 upstream=$2 suffix=$3
patches=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/patches
export DEBIAN_FRONTEND=noninteractive

cd "$build_dir"
apt-get source -q mosquitto/trixie
src=mosquitto-$upstream
[[ -d $src ]] || { echo "trixie's mosquitto source is not $upstream: $(ls)" >&2; exit 1; }
cd "$src"

# Build dependencies from bookworm (trixie's source builds against them unchanged).
apt-get build-dep -y -q --no-install-recommends .

# Our patches go after Debian's; dpkg-buildpackage applies the whole series before building.
for patch in "$patches"/*.patch; do
    cp "$patch" debian/patches/
    basename "$patch" >>debian/patches/series
done

# A version of our own, above trixie's, so dpkg and apt can tell this build from Debian's.
version="$(dpkg-parsechangelog -S Version)$suffix"
{
    printf 'mosquitto (%s) unstable; urgency=medium\n\n' "$version"
    printf '  * Local build by the sensor data service: deploy/mosquitto/patches.\n\n'
    printf ' -- sensor data service setup <root@localhost>  %s\n\n' "$(date -R)"
    cat debian/changelog
} >debian/changelog.new
mv debian/changelog.new debian/changelog

# nocheck: upstream's own test suite is skipped (it would take several times the build); the
# project's broker tests run against the installed broker (tests/chaos/test_broker_*.py).
DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" dpkg-buildpackage -b -uc -us
cd ..

# The broker, its client library and tools, and the headers the retain plugin is built with.
dpkg -i "libmosquitto1_${version}_"*.deb "mosquitto_${version}_"*.deb \
    "mosquitto-clients_${version}_"*.deb "libmosquitto-dev_${version}_"*.deb \
    "mosquitto-dev_${version}_"*.deb
echo "installed mosquitto $version"
