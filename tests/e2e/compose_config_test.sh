#!/usr/bin/env bash
# Validates docker-compose.yml and deploy/Dockerfile without a Docker engine: the compose
# file passes `docker-compose config -q`; every file they reference exists (build
# context, Dockerfile, bind-mounted configs and dashboards, COPY sources, none of them
# excluded by .dockerignore); and the pieces point at each other (Prometheus scrapes the
# attnserve service on the metrics port the image listens on; Grafana's datasource is the
# prometheus service and the dashboards use its uid; the dashboard provider reads the
# directory the compose file mounts). deploy/prometheus.yml also passes promtool.
# Usage: compose_config_test.sh   (any directory; it works from the repository root)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
fail() { echo "compose_config_test: FAIL: $*" >&2; exit 1; }
step() { echo "compose_config_test: $*"; }

command -v docker-compose >/dev/null || fail "docker-compose not found (deploy/install.sh installs it)"
step "docker-compose -f docker-compose.yml config -q"
docker-compose -f docker-compose.yml config -q || fail "docker-compose rejects docker-compose.yml"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
docker-compose -f docker-compose.yml config >"$work/compose.yml" || fail "docker-compose config"

if command -v promtool >/dev/null; then
  step "promtool check config deploy/prometheus.yml"
  promtool check config deploy/prometheus.yml >"$work/promtool.out" 2>&1 ||
    fail "promtool: $(cat "$work/promtool.out")"
fi

step "files referenced by the compose file and the Dockerfile, and their cross-references"
# The resolved compose file (absolute paths) is parsed with Debian's python3-yaml, which
# docker-compose depends on.
/usr/bin/python3 - "$repo" "$work/compose.yml" <<'PY'
import fnmatch, json, os, re, shlex, sys
import yaml

repo, resolved = sys.argv[1], sys.argv[2]
compose = yaml.safe_load(open(resolved))
errors = []
def check(ok, message):
    print(f"  {'ok ' if ok else 'BAD'} {message}")
    if not ok:
        errors.append(message)

services = compose["services"]
for name in ("attnserve", "prometheus", "grafana"):
    check(name in services, f"service {name}")
mounts = {}  # container path -> host path, for every bind mount
for name, service in services.items():
    build = service.get("build")
    if build:
        context = build["context"]
        dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
        check(os.path.isdir(context), f"{name}: build context {context}")
        check(os.path.isfile(dockerfile), f"{name}: dockerfile {dockerfile}")
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("/"):
            check(os.path.exists(source), f"{name}: bind mount source {source}")
            check(source.startswith(repo + "/"), f"{name}: {source} is inside the repository")
            mounts[target] = source

# The Dockerfile: instructions with their continuation lines joined.
dockerfile = os.path.join(services["attnserve"]["build"]["context"],
                          services["attnserve"]["build"]["dockerfile"])
text = re.sub(r"\\\n", " ", open(dockerfile).read())
instructions = [line.strip() for line in text.splitlines()
                if line.strip() and not line.strip().startswith("#")]
context = services["attnserve"]["build"]["context"]
ignore = [p.strip() for p in open(os.path.join(context, ".dockerignore"))
          if p.strip() and not p.startswith("#")] if os.path.exists(
              os.path.join(context, ".dockerignore")) else []
stages, copied, env = [], [], {}
for line in instructions:
    op, _, rest = line.partition(" ")
    op = op.upper()
    if op == "FROM":
        match = re.search(r"\bAS\s+(\S+)", rest, re.I)
        stages.append(match.group(1) if match else "")
    elif op in ("COPY", "ADD"):
        args = shlex.split(rest)
        flags = [a for a in args if a.startswith("--")]
        paths = [a for a in args if not a.startswith("--")]
        sources, dest = paths[:-1], paths[-1]
        from_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
        if from_stage is not None:
            check(from_stage in stages[:-1], f"COPY --from={from_stage}: an earlier stage")
            copied += [(s, dest) for s in sources]
            continue
        for source in sources:
            check(os.path.exists(os.path.join(context, source)), f"COPY source {source}")
            excluded = [p for p in ignore
                        if fnmatch.fnmatch(source.rstrip("/"), p.rstrip("/"))
                        or fnmatch.fnmatch(source.split("/")[0], p.rstrip("/"))]
            check(source == "." or not excluded, f"COPY source {source} not in .dockerignore")
    elif op == "ENV":
        env.update(dict(re.findall(r"(\w+)=(\S+)", rest)))
    elif op == "HEALTHCHECK":
        binary = json.loads(rest[rest.index("CMD") + 3:].strip())[0]
        check(any(s.endswith("/" + binary) for s, _ in copied),
              f"HEALTHCHECK runs {binary}, copied into the image")
    elif op == "ENTRYPOINT":
        binary = json.loads(rest)[0]
        check(any(s.endswith("/" + binary) for s, _ in copied),
              f"ENTRYPOINT {binary}, copied into the image")
for variable in ("ATTNSERVE_LISTEN", "ATTNSERVE_METRICS_LISTEN"):
    check(env.get(variable, "").startswith("0.0.0.0:"), f"{variable} on 0.0.0.0 in the image")
metrics_port = env.get("ATTNSERVE_METRICS_LISTEN", ":").rsplit(":", 1)[1]

# Prometheus scrapes the attnserve service on that port.
prometheus = yaml.safe_load(open(mounts["/etc/prometheus/prometheus.yml"]))
targets = [t for job in prometheus["scrape_configs"]
           for sc in job.get("static_configs", []) for t in sc["targets"]]
check(f"attnserve:{metrics_port}" in targets,
      f"prometheus.yml scrapes attnserve:{metrics_port} (targets: {targets})")

# Grafana: datasource -> prometheus service; dashboards use its uid; provider path mounted.
provisioning = mounts["/etc/grafana/provisioning"]
datasources = yaml.safe_load(open(os.path.join(
    provisioning, "datasources", "prometheus.yml")))["datasources"]
check(any(d["url"].startswith("http://prometheus:9090") for d in datasources),
      "grafana datasource is http://prometheus:9090")
uids = {d.get("uid") for d in datasources}
providers_dir = os.path.join(provisioning, "dashboards")
for provider_file in sorted(os.listdir(providers_dir)):
    for provider in yaml.safe_load(open(os.path.join(providers_dir, provider_file)))["providers"]:
        path = provider["options"]["path"]
        check(path in mounts, f"dashboard provider path {path} is mounted")
        folder = mounts.get(path, "")
        dashboards = sorted(f for f in os.listdir(folder) if f.endswith(".json")) \
            if os.path.isdir(folder) else []
        check(bool(dashboards), f"dashboards in {folder or path}")
        for name in dashboards:
            dashboard = json.load(open(os.path.join(folder, name)))
            used = {p["datasource"]["uid"] for p in dashboard["panels"]}
            check(used <= uids, f"{name}: datasource uids {sorted(used)} provisioned")
            check(all(t.get("expr") for p in dashboard["panels"] for t in p["targets"]),
                  f"{name}: every panel target has a query")
home = services["grafana"].get("environment", {}).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
if home:
    directory, name = os.path.split(home)
    check(directory in mounts and os.path.isfile(os.path.join(mounts[directory], name)),
          f"home dashboard {home} is mounted")
if errors:
    sys.exit(f"{len(errors)} problem(s)")
PY
echo "compose_config_test: all checks passed"
