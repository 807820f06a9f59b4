#!/usr/bin/env bash
# Validates docker-compose.yml, docker-compose.scale.yml and deploy/Dockerfile without a
# Docker engine: both compose files pass `docker-compose config -q`; every file they
# reference exists (build context, Dockerfile, bind-mounted configs and dashboards, COPY
# sources, none of them excluded by .dockerignore); every published port is on the
# host's loopback; and the pieces point at each other (Prometheus scrapes exactly the
# attnserve services on the metrics port the image listens on; Grafana's datasource is
# the prometheus service and the dashboards use its uid; the dashboard provider reads the
# directory the compose file mounts). The scale file's invariants: three replicas of the
# same image as docker-compose.yml's, on the redis service with --persist=each_turn,
# distinct hostnames; HAProxy's mounted config (deploy/haproxy/haproxy.cfg) routes to
# exactly those replicas on the image's gRPC port and listens where the compose file
# publishes; Prometheus labels each replica and scrapes HAProxy's exporter. The
# Prometheus configs pass promtool, the HAProxy config `haproxy -c` (when installed).
# Usage: compose_config_test.sh   (any directory; it works from the repository root)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
fail() { echo "compose_config_test: FAIL: $*" >&2; exit 1; }
step() { echo "compose_config_test: $*"; }

command -v docker-compose >/dev/null || fail "docker-compose not found (deploy/install.sh installs it)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for file in docker-compose.yml docker-compose.scale.yml; do
  step "docker-compose -f $file config -q"
  docker-compose -f "$file" config -q || fail "docker-compose rejects $file"
  docker-compose -f "$file" config >"$work/$file" || fail "docker-compose config $file"
done

if command -v promtool >/dev/null; then
  for config in deploy/prometheus.yml deploy/prometheus.scale.yml; do
    step "promtool check config $config"
    promtool check config "$config" >"$work/promtool.out" 2>&1 ||
      fail "promtool: $(cat "$work/promtool.out")"
  done
fi
if command -v haproxy >/dev/null; then
  # The replicas' names do not resolve here: HAProxy warns and starts them disabled.
  step "haproxy -c -f deploy/haproxy/haproxy.cfg"
  haproxy -c -f deploy/haproxy/haproxy.cfg >"$work/haproxy.out" 2>&1 ||
    fail "haproxy -c: $(cat "$work/haproxy.out")"
else
  step "haproxy not installed: deploy/haproxy/haproxy.cfg not checked by haproxy -c"
fi

step "files referenced by the compose files and the Dockerfile, and their cross-references"
# The resolved compose files (absolute paths) are parsed with Debian's python3-yaml,
# which docker-compose depends on.
/usr/bin/python3 - "$repo" "$work/docker-compose.yml" "$work/docker-compose.scale.yml" <<'PY'
import fnmatch, json, os, re, shlex, sys
import yaml

repo, single_file, scale_file = sys.argv[1:4]
errors = []
def check(ok, message):
    print(f"  {'ok ' if ok else 'BAD'} {message}")
    if not ok:
        errors.append(message)

def check_dockerfile(context, dockerfile):
    """COPY sources exist and are not ignored; returns the image's ENV."""
    text = re.sub(r"\\\n", " ", open(dockerfile).read())
    instructions = [line.strip() for line in text.splitlines()
                    if line.strip() and not line.strip().startswith("#")]
    ignore_file = os.path.join(context, ".dockerignore")
    ignore = [p.strip() for p in open(ignore_file)
              if p.strip() and not p.startswith("#")] if os.path.exists(ignore_file) else []
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
    return env

def validate(resolved, kind):
    """Checks one resolved compose file; returns its services and bind mounts."""
    print(f"  -- {os.path.basename(resolved)}")
    compose = yaml.safe_load(open(resolved))
    services = compose["services"]
    mounts = {}  # (service, container path) -> host path, for every bind mount
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
                mounts[(name, target)] = source
        for port in service.get("ports", []):
            # "127.0.0.1:HOST:CONTAINER/tcp", or a mapping when no host address is given.
            loopback = port.get("host_ip") == "127.0.0.1" if isinstance(port, dict) \
                else str(port).startswith("127.0.0.1:")
            check(loopback, f"{name}: port {port} on the host's loopback")

    # The server: every service built from deploy/Dockerfile.
    servers = sorted(n for n, s in services.items()
                     if s.get("build", {}).get("dockerfile") == "deploy/Dockerfile")
    check(servers == (["attnserve"] if kind == "single" else
                      ["attnserve-1", "attnserve-2", "attnserve-3"]),
          f"attnserve services built from deploy/Dockerfile: {servers}")
    for name in ("prometheus", "grafana"):
        check(name in services, f"service {name}")
    needed = [("prometheus", "/etc/prometheus/prometheus.yml"),
              ("grafana", "/etc/grafana/provisioning")]
    if not servers or not all(m in mounts for m in needed):
        check(False, f"an attnserve service and the mounts {needed}: cannot check further")
        return services, mounts, {}
    for name in servers:  # the image listens on 0.0.0.0: plaintext needs --insecure
        environment = services[name].get("environment") or {}
        check(str(environment.get("ATTNSERVE_INSECURE")).lower() == "true" or
              (environment.get("ATTNSERVE_TLS_CERT") and environment.get("ATTNSERVE_TLS_KEY")),
              f"{name}: ATTNSERVE_INSECURE=true or TLS (the server refuses 0.0.0.0 otherwise)")
    build = services[servers[0]]["build"]
    env = check_dockerfile(build["context"], os.path.join(build["context"], build["dockerfile"]))
    metrics_port = env.get("ATTNSERVE_METRICS_LISTEN", ":").rsplit(":", 1)[1]

    # Prometheus scrapes exactly the attnserve services on that port.
    prometheus = yaml.safe_load(open(mounts[("prometheus", "/etc/prometheus/prometheus.yml")]))
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    targets = sorted(t for sc in jobs.get("attnserve", {}).get("static_configs", [])
                     for t in sc["targets"])
    check(targets == sorted(f"{s}:{metrics_port}" for s in servers),
          f"prometheus job attnserve scrapes {targets}: the attnserve services on :{metrics_port}")

    # Grafana: datasource -> prometheus service; dashboards use its uid; provider path mounted.
    provisioning = mounts[("grafana", "/etc/grafana/provisioning")]
    datasources = yaml.safe_load(open(os.path.join(
        provisioning, "datasources", "prometheus.yml")))["datasources"]
    check(any(d["url"].startswith("http://prometheus:9090") for d in datasources),
          "grafana datasource is http://prometheus:9090")
    uids = {d.get("uid") for d in datasources}
    providers_dir = os.path.join(provisioning, "dashboards")
    for provider_file in sorted(os.listdir(providers_dir)):
        for provider in yaml.safe_load(open(os.path.join(providers_dir, provider_file)))["providers"]:
            path = provider["options"]["path"]
            check(("grafana", path) in mounts, f"dashboard provider path {path} is mounted")
            folder = mounts.get(("grafana", path), "")
            dashboards = sorted(f for f in os.listdir(folder) if f.endswith(".json")) \
                if os.path.isdir(folder) else []
            check(bool(dashboards), f"dashboards in {folder or path}")
            for name in dashboards:
                dashboard = json.load(open(os.path.join(folder, name)))
                used = {p["datasource"]["uid"] for p in dashboard["panels"]}
                used |= {v["datasource"]["uid"] for v in dashboard["templating"]["list"]
                         if "datasource" in v}
                check(used <= uids, f"{name}: datasource uids {sorted(used)} provisioned")
                check(all(t.get("expr") for p in dashboard["panels"] for t in p["targets"]),
                      f"{name}: every panel target has a query")
    home = services["grafana"].get("environment", {}).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        directory, name = os.path.split(home)
        check(("grafana", directory) in mounts and
              os.path.isfile(os.path.join(mounts[("grafana", directory)], name)),
              f"home dashboard {home} is mounted")
    return services, mounts, {"env": env, "servers": servers, "jobs": jobs,
                              "metrics_port": metrics_port}

single, _, _ = validate(single_file, "single")
services, mounts, found = validate(scale_file, "scale")
if found:
    servers, env, jobs = found["servers"], found["env"], found["jobs"]
    grpc_port = env["ATTNSERVE_LISTEN"].rsplit(":", 1)[1]
    # The replicas: docker-compose.yml's image, the shared store, each_turn, own hostnames.
    for name in servers:
        s = services[name]
        check((s.get("image"), s.get("build")) ==
              (single["attnserve"].get("image"), single["attnserve"].get("build")),
              f"{name}: the image and build of docker-compose.yml's attnserve")
        environment = s.get("environment", {})
        store = environment.get("ATTNSERVE_SESSION_STORE") or ""
        match = re.fullmatch(r"redis://([\w.-]+):(\d+)(/\d+)?", store)
        check(bool(match) and match.group(1) in services,
              f"{name}: ATTNSERVE_SESSION_STORE={store} names a service")
        check(environment.get("ATTNSERVE_PERSIST") == "each_turn", f"{name}: ATTNSERVE_PERSIST=each_turn")
        check(name in s.get("depends_on", {}) or (match and match.group(1) in s.get("depends_on", {})),
              f"{name}: depends on the store's service")
    stores = {services[n]["environment"].get("ATTNSERVE_SESSION_STORE") for n in servers}
    check(len(stores) == 1, f"the replicas share one store: {sorted(map(str, stores))}")
    hostnames = [services[n].get("hostname") for n in servers]
    check(len(set(hostnames)) == len(servers) and None not in hostnames,
          f"the replicas have distinct hostnames: {hostnames}")

    # HAProxy: its mounted config routes to exactly the replicas, listens where published.
    check("haproxy" in services, "service haproxy")
    config_path = mounts.get(("haproxy", "/usr/local/etc/haproxy/haproxy.cfg"))
    check(config_path == os.path.join(repo, "deploy/haproxy/haproxy.cfg"),
          f"haproxy mounts deploy/haproxy/haproxy.cfg at the official image's path ({config_path})")
    if config_path:
        config = open(config_path).read()
        def default(variable):
            match = re.search(r'"\$\{' + variable + r'-([^}"]*)\}"', config)
            return match.group(1) if match else None
        # Each backend's servers, by section: gRPC's on the replicas' gRPC port, the HTTP
        # API's on their HTTP port (the image's ATTNSERVE_HTTP_LISTEN).
        sections = re.split(r'^(?=(?:frontend|backend|global|defaults|resolvers)\b)', config, flags=re.M)
        def servers_of(backend):
            for section in sections:
                if re.match(r'backend\s+' + backend + r'\s*$', section.split("\n", 1)[0]):
                    found_servers = re.findall(r'^\s*server\s+(\S+)\s+"\$\{(\w+)-([^}]*)\}"', section, re.M)
                    return sorted(address for _, _, address in found_servers)
            return None
        http_port = env.get("ATTNSERVE_HTTP_LISTEN", ":").rsplit(":", 1)[1]
        for backend, port in (("attnserve", grpc_port), ("attnserve_http", http_port)):
            addresses = servers_of(backend)
            check(addresses == sorted(f"{n}:{port}" for n in servers),
                  f"haproxy.cfg's backend {backend} servers default to {addresses}: the replicas on :{port}")
        published = {str(p["target"]) if isinstance(p, dict) else p.split(":")[-1].split("/")[0]
                     for p in services["haproxy"].get("ports", [])}
        for variable in ("ATTNSERVE_PROXY_BIND", "ATTNSERVE_PROXY_HTTP_BIND", "HAPROXY_STATS_BIND",
                         "HAPROXY_RUNTIME_API"):
            value = default(variable) or ""
            check(value.rsplit(":", 1)[-1] in published,
                  f"haproxy.cfg {variable} default {value}: its port is published")
        stats_port = (default("HAPROXY_STATS_BIND") or ":").rsplit(":", 1)[1]
        haproxy_targets = [t for sc in jobs.get("haproxy", {}).get("static_configs", [])
                           for t in sc["targets"]]
        check(haproxy_targets == [f"haproxy:{stats_port}"],
              f"prometheus job haproxy scrapes {haproxy_targets}: haproxy:{stats_port}")
    labels = {t: sc.get("labels", {}).get("replica")
              for sc in jobs["attnserve"]["static_configs"] for t in sc["targets"]}
    check(all(labels.get(f"{n}:{found['metrics_port']}") == n for n in servers),
          f"prometheus labels each replica target with replica=<service>: {labels}")
if errors:
    sys.exit(f"{len(errors)} problem(s)")
PY
echo "compose_config_test: all checks passed"
