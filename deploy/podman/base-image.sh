#!/usr/bin/env bash
# Makes the local stand-in for the official debian:12 image, for podman on machines that
# reach no image registry (the project's machines and CI: server/DESIGN.md §6): a minimal
# Debian 12 root file system from the host's own apt mirror (debootstrap --variant=minbase),
# given the host's apt sources (same mirror, bookworm-updates and security), imported as
# docker.io/library/debian:12 so that `FROM debian:12` in deploy/Dockerfile and
# deploy/podman/*.Containerfile resolves to it. Does nothing if the image exists
# (--force: make it again). Run as root; needs debootstrap and podman.
#
#   deploy/podman/base-image.sh [--force]
#
# CONTAINERS_CONF defaults to deploy/podman/containers.conf. Takes about a minute.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}
image=docker.io/library/debian:12

if [ "${1:-}" != --force ] && podman image exists "$image"; then
  echo "base-image: $image exists"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "base-image: debootstrap not found" >&2; exit 1; }

# The first URI of the host's Debian sources (deb822 or one-line format).
sources=/etc/apt/sources.list.d/debian.sources
mirror=""
if [ -f "$sources" ]; then
  mirror=$(awk '/^URIs:/ { print $2; exit }' "$sources")
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list)
fi
mirror=${mirror:-http://deb.debian.org/debian}

root=$(mktemp -d /tmp/attnserve-debian12.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "base-image: debootstrap --variant=minbase bookworm from $mirror"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -n 20 "$root.log" >&2
  rm -f "$root.log"
  exit 1
}
rm -f "$root.log"
# The host's sources (with updates and security), so that packages installed in an image
# are the versions the host has: binaries built on the host run in it.
if [ -f "$sources" ]; then
  cp "$sources" "$root/etc/apt/sources.list.d/debian.sources"
  rm -f "$root/etc/apt/sources.list"
fi
# As the official image: no package cache, no package lists (a build runs apt-get update).
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | podman import --quiet \
  --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  - "$image" >/dev/null
echo "base-image: $image: $(podman image inspect --format '{{.Size}}' "$image") bytes"
