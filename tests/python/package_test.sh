#!/usr/bin/env bash
# The Python client as a package: client/python installed the way its README says (a
# venv made by Debian's /usr/bin/python3 with --system-site-packages, so Debian's
# python3-grpcio and python3-protobuf are used; pip install --no-build-isolation with no
# package index: nothing is downloaded), python3 -m build making an sdist and a wheel
# from it, then package_test.py (unittest) with the venv's python against a real
# attnserve_server with two tenants' API keys, beside the C++ client.
# Usage: package_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
test_name=python_package_test
work=$(mktemp -d)
source "$repo/tests/e2e/lib.sh"
trap 'stop "$server_pid"; rm -rf "$work"' EXIT
logs="server pip"
# Only what a Debian user has: no pip configuration, wheel directory or PYTHONPATH.
unset PYTHONPATH PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL
export PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1

# pip and build write build/ and *.egg-info into the source tree: a copy keeps the
# checkout clean and lets two runs go at once.
cp -r "$repo/client/python" "$work/src"
rm -rf "$work/src/build" "$work/src/dist" "$work/src"/*.egg-info

step "pip install --no-build-isolation client/python into a fresh venv"
/usr/bin/python3 -m venv --system-site-packages "$work/venv" >"$work/pip.log" 2>&1 ||
  fail "python3 -m venv (python3-venv): $(cat "$work/pip.log")"
"$work/venv/bin/pip" install --no-build-isolation "$work/src" >>"$work/pip.log" 2>&1 ||
  fail "pip install"
grep -q "Successfully installed attnserve-" "$work/pip.log" || fail "pip installed no attnserve"
[ -x "$work/venv/bin/attnserve" ] || fail "no attnserve console script in the venv"

step "python3 -m build --no-isolation: an sdist, and a wheel built from it"
/usr/bin/python3 -m build --version >/dev/null 2>&1 ||
  fail "python3 -m build is missing (python3-build; deploy/install.sh)"
/usr/bin/python3 -m build --no-isolation --outdir "$work/dist" "$work/src" \
  >"$work/pip.log" 2>&1 || fail "python3 -m build"
"$py" - "$work/dist" <<'PY' || fail "the built distributions lack files"
import glob, sys, tarfile, zipfile
dist = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(f"{dist}/attnserve-*.whl")[0]).namelist()
sdist = tarfile.open(glob.glob(f"{dist}/attnserve-*.tar.gz")[0]).getnames()
for name in ("attnserve/__init__.py", "attnserve/cli.py", "attnserve/v1/attnserve_pb2.py",
             "attnserve/v1/attnserve_pb2_grpc.py", "attnserve/v1/model_config_pb2.py",
             "attnserve/v1/attnserve_pb2.pyi"):
    assert name in wheel, f"{name} not in the wheel"
    assert any(n.endswith("/" + name) for n in sdist), f"{name} not in the sdist"
entry = next(n for n in wheel if n.endswith("entry_points.txt"))
with zipfile.ZipFile(glob.glob(f"{dist}/attnserve-*.whl")[0]) as w:
    assert "attnserve = attnserve.cli:main" in w.read(entry).decode(), "no console script"
print(f"  {len(wheel)} files in the wheel, {len(sdist)} in the sdist")
PY

keys="$work/keys.txt"
printf 'py-alice-0123456789abcdef alice\npy-bob-0123456789abcdef bob\n' >"$keys"
chmod 600 "$keys"
addr=127.0.0.1:$(free_port)
start_server "$addr" 127.0.0.1:$(free_port) --api_keys_file="$keys"

step "package_test.py with the venv's python"
ATTNSERVE_TEST_SERVER=$addr ATTNSERVE_TEST_CLIENT=$client_bin \
  ATTNSERVE_TEST_KEY=py-alice-0123456789abcdef ATTNSERVE_TEST_OTHER_KEY=py-bob-0123456789abcdef \
  ATTNSERVE_TEST_NO_SERVER=127.0.0.1:$(free_port) ATTNSERVE_TEST_WORK=$work \
  "$work/venv/bin/python" "$repo/tests/python/package_test.py" -v 2>&1 ||
  fail "package_test.py failed"
[ "$("$client_bin" --server="$addr" health)" = SERVING ] || fail "the server is no longer SERVING"
echo "python_package_test: all checks passed"
