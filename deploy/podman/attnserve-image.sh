#!/usr/bin/env bash
# Builds the attnserve image from deploy/Dockerfile with podman, on machines that reach no
# image registry (server/DESIGN.md §6), and skips the build when the image is up to date.
#
#   deploy/podman/attnserve-image.sh [--force] [IMAGE]     (IMAGE: localhost/attnserve:latest)
#
# First the local debian:12 base (base-image.sh, once). Then `podman build` with the flags
# these machines need (runc, cgroupfs, host network) and two more: --format docker (the
# OCI format silently drops the Dockerfile's HEALTHCHECK), --layers=false (no
# intermediate images: the build stage alone is ~3.3 GB; nothing to clean up after) and
# --force-rm (no build containers left behind by a failed build either).
# The image is labelled with a SHA-256 of what it was built from: every file of the build
# context that .dockerignore lets in (paths, contents, executable bits), the Dockerfile,
# and the base image's id. If IMAGE carries the same label, the build is skipped; a
# rebuild removes the image it replaces (when no container uses it). --force: build anyway.
# A build takes 3-6 min on 2 cores (measured 180-360 s, depending on what else runs; nearly
# all of it the compile with ccache off: install.sh takes ~40 s). Any change to a file in
# the context (tests/ and docs included, as COPY . /src copies them) means a full build.
# Prints a summary line: built/reused, seconds, size.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}
pm() { podman --runtime=runc --cgroup-manager=cgroupfs "$@"; }
force=""
if [ "${1:-}" = --force ]; then force=1; shift; fi
image=${1:-localhost/attnserve:latest}
dockerfile=deploy/Dockerfile
label=org.attnserve.build-input

"$here/base-image.sh"
base_id=$(pm image inspect --format '{{.Id}}' docker.io/library/debian:12)

# The build input's hash, with .dockerignore's rules (Docker's: a pattern matches the
# path from the context root, `*` and `?` stay within one path element, `**` spans any
# number; an excluded directory excludes everything under it). A `!` exception makes
# the hash cover every file (a needless rebuild at worst, never a stale image).
input=$(/usr/bin/python3 - "$repo" "$dockerfile" "$base_id" <<'PY'
import hashlib, os, re, stat, sys
root, dockerfile, base_id = sys.argv[1:4]
patterns = []
ignore = os.path.join(root, ".dockerignore")
if os.path.exists(ignore):
    for line in open(ignore):
        line = line.strip()
        if line and not line.startswith("#"):
            patterns.append(line)
if any(p.startswith("!") for p in patterns):
    patterns = []
def to_regex(pattern):
    pattern = os.path.normpath(pattern).lstrip("/")
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out += ".*"; i += 2
            if pattern.startswith("/", i): out += "/?"; i += 1  # **/ also matches nothing
        elif pattern[i] == "*": out += "[^/]*"; i += 1
        elif pattern[i] == "?": out += "[^/]"; i += 1
        else: out += re.escape(pattern[i]); i += 1
    return re.compile(out + r"\Z")
regexes = [to_regex(p) for p in patterns]
excluded = lambda rel: any(r.match(rel) for r in regexes)
digest = hashlib.sha256()
digest.update(f"dockerfile={dockerfile}\0base={base_id}\0".encode())
for directory, dirs, files in os.walk(root):
    rel_dir = os.path.relpath(directory, root)
    rel_dir = "" if rel_dir == "." else rel_dir + "/"
    dirs[:] = sorted(d for d in dirs if not excluded(rel_dir + d))
    for name in sorted(files):
        rel = rel_dir + name
        if excluded(rel):
            continue
        path = os.path.join(directory, name)
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            content = b"link:" + os.readlink(path).encode()
        else:
            content = hashlib.sha256(open(path, "rb").read()).hexdigest().encode()
        executable = b"x" if info.st_mode & 0o111 else b"-"
        digest.update(rel.encode() + b"\0" + executable + content + b"\0")
print(digest.hexdigest())
PY
)

old_id=$(pm image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
if [ -z "$force" ] && [ -n "$old_id" ] &&
   [ "$(pm image inspect --format "{{index .Labels \"$label\"}}" "$image")" = "$input" ]; then
  echo "attnserve-image: $image is up to date (build input ${input:0:12}): reused, 0 s," \
       "$(pm image inspect --format '{{.Size}}' "$image") bytes"
  exit 0
fi
log=$(mktemp /tmp/attnserve-image-build.XXXXXX.log)
echo "attnserve-image: building $image from $dockerfile (build input ${input:0:12}; log $log)"
start=$SECONDS
if ! pm build --network=host --format docker --layers=false --force-rm --label "$label=$input" \
       -f "$repo/$dockerfile" -t "$image" "$repo" >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  echo "attnserve-image: podman build failed (log $log)" >&2
  exit 1
fi
seconds=$((SECONDS - start))
new_id=$(pm image inspect --format '{{.Id}}' "$image")
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
  pm rmi "$old_id" >/dev/null 2>&1 || true  # still used by a container: left alone
fi
rm -f "$log"
echo "attnserve-image: $image built in $seconds s, $(pm image inspect --format '{{.Size}}' "$image") bytes"
