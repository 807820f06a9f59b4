#!/usr/bin/env bash
# Validates the Kubernetes manifests in deploy/k8s/ offline (no cluster, no kubectl or
# kubeconform here): every file parses (Debian's python3-yaml); the objects are the
# expected kinds and API versions, with no namespace; every ConfigMap, volume, label
# selector, Service targetPort and probe port resolves within the manifests; the server
# replicas use native gRPC probes on their gRPC port, a preStop pause, and a termination
# grace longer than preStop + ATTNSERVE_SHUTDOWN_GRACE + the session flush; the store
# URL names the Redis Service; every ATTNSERVE_* variable is a server flag (the server's
# --help) and every model directory is one the image ships (deploy/Dockerfile); the
# HAProxy ConfigMap's haproxy.cfg passes `haproxy -c`, discovers the replicas through the
# headless Service, and health-checks them exactly like deploy/haproxy/haproxy.cfg.
# Given the binaries, that haproxy.cfg also runs for real: a stand-in cluster DNS on
# loopback answers the headless Service's name with 127.0.0.1-3, where three real
# servers listen; HAProxy must fill its server-template slots from the answer, pass the
# gRPC health checks, route through them, and drop a replica that leaves the answer.
# Usage: k8s_manifests_test.sh [SERVER_BINARY [CLIENT_BINARY]]
#   without SERVER_BINARY the flag check is skipped, without both the live part
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
server_bin=${1:-} client_bin=${2:-}
test_name=k8s_manifests_test logs=""
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
dns_pid="" haproxy_pid="" pids=()
cleanup() {
  local pid
  for pid in "$haproxy_pid" "$dns_pid" "${pids[@]}"; do stop "$pid"; done
  rm -rf "$work"
}
trap cleanup EXIT

/usr/bin/python3 -c 'import yaml' 2>/dev/null ||
  fail "Debian's python3-yaml is missing (deploy/install.sh installs docker-compose, which needs it)"
command -v haproxy >/dev/null ||
  fail "haproxy not found: deploy/install.sh installs Debian's 'haproxy' (2.6)"
if [ -n "$server_bin" ]; then
  "$server_bin" --help >"$work/help.txt" 2>&1 || fail "$server_bin --help"
fi

step "parsing deploy/k8s/*.yaml and resolving every reference"
/usr/bin/python3 - "$repo" "$work" <<'PY' || fail "the manifests (above)"
import glob, os, re, subprocess, sys
import yaml

repo, work = sys.argv[1:3]
k8s = os.path.join(repo, "deploy", "k8s")
errors = []
def check(ok, message):
    print(f"  {'ok ' if ok else 'BAD'} {message}")
    if not ok:
        errors.append(message)
def done():
    if errors:
        sys.exit(f"{len(errors)} problem(s)")

# --- parse, kinds, API versions ----------------------------------------------------------
API = {"ConfigMap": "v1", "Service": "v1", "Deployment": "apps/v1",
       "Kustomization": "kustomize.config.k8s.io/v1beta1"}
EXPECTED = {("Deployment", "attnserve"), ("Deployment", "haproxy"), ("Deployment", "redis"),
            ("Service", "attnserve"), ("Service", "attnserve-headless"),
            ("Service", "attnserve-metrics"), ("Service", "redis"),
            ("ConfigMap", "attnserve-config"), ("ConfigMap", "attnserve-models"),
            ("ConfigMap", "haproxy-config")}
objects, kustomization, files = {}, None, sorted(glob.glob(os.path.join(k8s, "*.yaml")))
for path in files:
    name = os.path.basename(path)
    try:
        docs = [d for d in yaml.safe_load_all(open(path)) if d is not None]
    except yaml.YAMLError as e:
        check(False, f"{name}: parses ({e})")
        continue
    check(bool(docs), f"{name}: parses, {len(docs)} object(s)")
    for doc in docs:
        kind = doc.get("kind")
        check(API.get(kind) == doc.get("apiVersion"),
              f"{name}: {kind} has apiVersion {doc.get('apiVersion')} (expected {API.get(kind)})")
        if kind == "Kustomization":
            kustomization = doc
            continue
        meta = doc.get("metadata", {})
        check("namespace" not in meta, f"{name}: {kind}/{meta.get('name')} names no namespace")
        check((kind, meta.get("name")) not in objects, f"{name}: {kind}/{meta.get('name')} is unique")
        objects[(kind, meta.get("name"))] = doc
check(set(objects) == EXPECTED, f"objects: {sorted(objects)}")
check(kustomization is not None and sorted(kustomization.get("resources", [])) ==
      sorted(os.path.basename(f) for f in files if not f.endswith("kustomization.yaml")),
      "kustomization.yaml lists every other manifest")
done()

configmaps = {n: o.get("data", {}) for (k, n), o in objects.items() if k == "ConfigMap"}
deployments = {n: o for (k, n), o in objects.items() if k == "Deployment"}
services = {n: o for (k, n), o in objects.items() if k == "Service"}

def duration_seconds(text):
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    check("".join(a + b for a, b in parts) == text and parts, f"duration {text!r} parses")
    return sum(float(a) * units[b] for a, b in parts)

def container_port(container, port):
    """The containerPort a probe or Service port refers to (a number or a port name)."""
    for p in container.get("ports", []):
        if port in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    return None

# --- Deployments: selectors, ConfigMaps, volumes, probes ---------------------------------
env_of = {}  # deployment -> {variable: value} from its ConfigMaps and literal env
for name, d in deployments.items():
    spec, template = d["spec"], d["spec"]["template"]
    labels = template["metadata"].get("labels", {})
    selector = spec["selector"]["matchLabels"]
    check(selector.items() <= labels.items(), f"Deployment {name}: selector {selector} matches its pods")
    pod = template["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for v in volumes.values():
        if "configMap" in v:
            check(v["configMap"]["name"] in configmaps,
                  f"Deployment {name}: volume {v['name']} -> ConfigMap {v['configMap']['name']}")
    env = {}
    for c in pod["containers"]:
        for source in c.get("envFrom", []):
            ref = source.get("configMapRef", {}).get("name")
            check(ref in configmaps, f"Deployment {name}: envFrom ConfigMap {ref}")
            env.update(configmaps.get(ref, {}))
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("configMapKeyRef")
            if ref:
                check(ref["key"] in configmaps.get(ref["name"], {}),
                      f"Deployment {name}: env {e['name']} -> ConfigMap {ref['name']} key {ref['key']}")
            if "value" in e:
                env[e["name"]] = e["value"]
            if "fieldRef" in e.get("valueFrom", {}):
                env[e["name"]] = "<" + e["valueFrom"]["fieldRef"]["fieldPath"] + ">"
        for m in c.get("volumeMounts", []):
            check(m["name"] in volumes, f"Deployment {name}: volumeMount {m['name']} is a volume")
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = c.get(kind)
            if not probe:
                continue
            for handler in ("grpc", "httpGet", "tcpSocket"):
                if handler in probe:
                    port = probe[handler]["port"]
                    check(container_port(c, port) is not None,
                          f"Deployment {name}: {kind} {handler} port {port} is a container port")
    env_of[name] = env

# --- Services: selectors resolve to exactly one Deployment, ports to its container -------
def pods_of(service):
    selector = service["spec"].get("selector", {})
    return [n for n, d in deployments.items()
            if selector and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
backing = {}
for name, s in services.items():
    matched = pods_of(s)
    check(len(matched) == 1, f"Service {name}: selector matches one Deployment ({matched})")
    if len(matched) != 1:
        continue
    backing[name] = matched[0]
    container = deployments[matched[0]]["spec"]["template"]["spec"]["containers"][0]
    for p in s["spec"]["ports"]:
        target = p.get("targetPort", p["port"])
        check(container_port(container, target) is not None,
              f"Service {name}: port {p['port']} -> {matched[0]} container port {target}")
check(services["attnserve-headless"]["spec"].get("clusterIP") == "None",
      "Service attnserve-headless is headless (clusterIP: None)")
check(backing.get("attnserve-headless") == "attnserve" and backing.get("attnserve-metrics") == "attnserve"
      and backing.get("attnserve") == "haproxy" and backing.get("redis") == "redis",
      f"Services front the right Deployments: {backing}")
done()

# --- the server replicas -----------------------------------------------------------------
server = deployments["attnserve"]
pod = server["spec"]["template"]["spec"]
container = pod["containers"][0]
env = env_of["attnserve"]
grpc_port = container_port(container, "grpc")
check(server["spec"]["replicas"] == 3, "Deployment attnserve: 3 replicas")
for kind in ("readinessProbe", "livenessProbe"):
    probe = container.get(kind, {})
    check(probe.get("grpc", {}).get("port") == grpc_port,
          f"attnserve {kind}: native gRPC probe on the gRPC port {grpc_port}")
pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
check(len(pre_stop) == 2 and pre_stop[0] == "sleep" and pre_stop[1].isdigit() and int(pre_stop[1]) > 0,
      f"attnserve preStop: {pre_stop}")
pause = int(pre_stop[1]) if len(pre_stop) == 2 and pre_stop[1].isdigit() else 0
grace = duration_seconds(env.get("ATTNSERVE_SHUTDOWN_GRACE", "10s"))  # the server's default
flush = 10  # writing every session at the end of a drain (a generous allowance)
termination = pod.get("terminationGracePeriodSeconds", 30)
check(termination >= pause + grace + flush,
      f"terminationGracePeriodSeconds {termination} >= preStop {pause} + shutdown grace {grace:g} + flush {flush}")
live = container["livenessProbe"]
window = live.get("periodSeconds", 10) * live.get("failureThreshold", 3)
check(window >= termination,
      f"liveness window {window} s >= termination grace {termination} s (a draining replica is NOT_SERVING)")
check(all(k in container.get("resources", {}).get(s, {}) for s in ("requests", "limits")
          for k in ("cpu", "memory") if not (s == "limits" and k == "cpu")) ,
      "attnserve resources: cpu and memory requests, a memory limit")
store = env.get("ATTNSERVE_SESSION_STORE", "")
match = re.fullmatch(r"redis://([\w.-]+):(\d+)(/\d+)?", store)
check(bool(match) and match.group(1) in services and
      int(match.group(2)) in [p["port"] for p in services[match.group(1)]["spec"]["ports"]],
      f"ATTNSERVE_SESSION_STORE={store}: a Service and its port")
check(env.get("ATTNSERVE_PERSIST") == "each_turn", "ATTNSERVE_PERSIST=each_turn")
# The image listens on 0.0.0.0: in plaintext the server refuses that without --insecure.
check(env.get("ATTNSERVE_INSECURE") == "true" or
      ("ATTNSERVE_TLS_CERT" in env and "ATTNSERVE_TLS_KEY" in env),
      "the replicas (on the image's 0.0.0.0) set ATTNSERVE_INSECURE=true or TLS")
help_path = os.path.join(work, "help.txt")
if os.path.exists(help_path):
    flags = set(re.findall(r"env (ATTNSERVE_\w+)", open(help_path).read()))
    for variable in sorted(v for v in env if v.startswith("ATTNSERVE_")):
        check(variable in flags, f"{variable} is a server flag (attnserve_server --help)")
else:
    print("  --- no server binary given: ATTNSERVE_* names not checked against --help")
dockerfile = re.sub(r"\\\n", " ", open(os.path.join(repo, "deploy", "Dockerfile")).read())
shipped = set()
for line in dockerfile.splitlines():
    words = line.split()
    if words and words[0] == "COPY" and not any(w.startswith("--from") for w in words):
        shipped.add(words[-1].rstrip("/"))
for directory in env.get("ATTNSERVE_MODEL_DIRS", "").split(","):
    check(directory in shipped, f"model directory {directory} is shipped in the image (deploy/Dockerfile)")

# --- images agree with the compose stack -------------------------------------------------
scale = yaml.safe_load(open(os.path.join(repo, "docker-compose.scale.yml")))
def compose_image(service):
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", scale["services"][service]["image"])
for deployment, service in (("attnserve", "attnserve-1"), ("haproxy", "haproxy"), ("redis", "redis")):
    image = deployments[deployment]["spec"]["template"]["spec"]["containers"][0]["image"]
    check(image == compose_image(service),
          f"Deployment {deployment} image {image} = docker-compose.scale.yml's {compose_image(service)}")

# --- HAProxy -----------------------------------------------------------------------------
proxy = deployments["haproxy"]["spec"]["template"]["spec"]
proxy_container = proxy["containers"][0]
mount = [m for m in proxy_container.get("volumeMounts", [])
         if proxy["volumes"][0]["name"] == m["name"]]
check(proxy["volumes"][0].get("configMap", {}).get("name") == "haproxy-config" and mount and
      mount[0]["mountPath"] == "/usr/local/etc/haproxy",
      "haproxy-config mounted at /usr/local/etc/haproxy (the official image's haproxy.cfg)")
config = configmaps["haproxy-config"].get("haproxy.cfg", "")
open(os.path.join(work, "k8s-haproxy.cfg"), "w").write(config)
variables = set(re.findall(r"\$\{(\w+)\}", config))
proxy_env = env_of["haproxy"]
check(variables <= set(proxy_env), f"haproxy.cfg's variables {sorted(variables)} are set in the pod")
template = re.search(r'^\s*server-template\s+\S+\s+(\d+)\s+"([^"]+)"', config, re.M)
check(bool(template), "haproxy.cfg has a server-template")
if template:
    fqdn, _, port = template.group(2).rpartition(":")
    host = fqdn.split(".")[0]
    check(host == "attnserve-headless" and ".${POD_NAMESPACE}.svc." in fqdn,
          f"server-template resolves {fqdn}: the headless Service in the pod's namespace")
    check(int(port) in [p["port"] for p in services["attnserve-headless"]["spec"]["ports"]] and
          int(port) == grpc_port, f"server-template port {port}: the headless Service's gRPC port")
    check(int(template.group(1)) >= server["spec"]["replicas"],
          f"server-template slots {template.group(1)} >= replicas {server['spec']['replicas']}")
    line = config[template.start():].split("\n")[0]
    uses = re.search(r"\bresolvers\s+(\S+)", line)
    check(bool(uses) and re.search(r"^resolvers\s+" + re.escape(uses.group(1)) + r"\s*$", config, re.M),
          f"server-template uses a resolvers section ({uses.group(1) if uses else None})")
binds = dict(re.findall(r"^frontend\s+(\S+)\s*\n\s*bind\s+\S*?:(\d+)", config, re.M))
check(int(binds.get("grpc", 0)) == container_port(proxy_container, "grpc"),
      f"haproxy listens for gRPC on its container port ({binds.get('grpc')})")
check(int(binds.get("stats", 0)) == container_port(proxy_container, "stats"),
      f"haproxy stats on its container port ({binds.get('stats')})")
monitor = re.search(r"^\s*monitor-uri\s+(\S+)", config, re.M)
check(monitor and proxy_container["readinessProbe"]["httpGet"]["path"] == monitor.group(1),
      "haproxy readiness probe path is its monitor-uri")
def checks(text):
    return [" ".join(l.split()) for l in text.splitlines() if l.strip().startswith("tcp-check")]
compose_cfg = open(os.path.join(repo, "deploy", "haproxy", "haproxy.cfg")).read()
check(checks(config) == checks(compose_cfg) and checks(config),
      "the gRPC health check is deploy/haproxy/haproxy.cfg's, line for line")
generated = subprocess.run(["/usr/bin/python3",
                            os.path.join(repo, "deploy", "haproxy", "grpc_health_check.py")],
                           capture_output=True, text=True, check=True).stdout.split()
sent = [l.split()[2] for l in checks(config) if l.startswith("tcp-check send-binary")]
check(sent == generated, "its bytes are grpc_health_check.py's output")
for option in ("balance hdr(x-session-id)", "hash-type consistent", "timeout server 1h",
               "timeout client 1h", "timeout tunnel 1h", "option redispatch 1"):
    check(option in config, f"haproxy.cfg: {option}")
done()
PY

step "haproxy -c on the ConfigMap's haproxy.cfg (POD_NAMESPACE=default)"
POD_NAMESPACE=default haproxy -c -f "$work/k8s-haproxy.cfg" >"$work/haproxy.out" 2>&1 ||
  fail "haproxy -c: $(cat "$work/haproxy.out")"
cat "$work/haproxy.out"

if [ -z "$client_bin" ]; then
  step "all offline checks passed; no binaries given: the live check is skipped"
  exit 0
fi

# --- live: the k8s haproxy.cfg against a stand-in cluster DNS ---------------------------
# Three servers on 127.0.0.1-3 (all loopback on Linux), one gRPC port and one HTTP port,
# as pods share them.
port=$(free_port) http_port=$(free_port)
for i in 1 2 3; do
  start_named "pod$i" "127.0.0.$i:$port" "127.0.0.1:$(free_port)" --http_listen="127.0.0.$i:$http_port"
  pids[i]=$started_pid
done
fqdn=attnserve-headless.default.svc.cluster.local
echo "127.0.0.1 127.0.0.2 127.0.0.3" >"$work/dns-answer"
dns_port=$(free_port)
step "stand-in cluster DNS on 127.0.0.1:$dns_port: $fqdn -> $(cat "$work/dns-answer")"
# Answers A queries for $fqdn with the addresses in dns-answer (read per query), an
# empty NOERROR for its other types, NXDOMAIN for any other name.
"$py" - "$dns_port" "$fqdn" "$work/dns-answer" >"$work/dns.log" 2>&1 <<'PY' &
import socket, struct, sys
port, fqdn, answer_file = int(sys.argv[1]), sys.argv[2].lower(), sys.argv[3]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", port))
while True:
    query, peer = sock.recvfrom(4096)
    ident, flags = struct.unpack(">HH", query[:4])
    labels, offset = [], 12
    while query[offset]:
        labels.append(query[offset + 1:offset + 1 + query[offset]].decode().lower())
        offset += 1 + query[offset]
    qtype = struct.unpack(">H", query[offset + 1:offset + 3])[0]
    question = query[12:offset + 5]
    name = ".".join(labels)
    records = []
    if name == fqdn and qtype == 1:
        for address in open(answer_file).read().split():
            records.append(struct.pack(">HHHIH", 0xC00C, 1, 1, 5, 4) + socket.inet_aton(address))
    rcode = 0 if name == fqdn else 3
    header = struct.pack(">HHHHHH", ident, 0x8400 | (flags & 0x0100) | rcode, 1, len(records), 0, 0)
    sock.sendto(header + question + b"".join(records), peer)
    print(name, qtype, len(records), flush=True)
PY
dns_pid=$!

proxy=127.0.0.1:$(free_port) http_proxy=127.0.0.1:$(free_port)
# Every address moved: left on :8000, the HTTP frontend would also be what the HTTP
# backend's 127.0.0.1:8000 reaches, and HAProxy would proxy to itself.
sed -e "s|^\( *\)parse-resolv-conf|\1nameserver stand-in 127.0.0.1:$dns_port|" \
  -e "s|bind :50051 proto h2|bind $proxy proto h2|" \
  -e "s|bind :8000\$|bind $http_proxy|" \
  -e "s|bind :8404|bind 127.0.0.1:$(free_port)|" \
  -e "s|stats socket ipv4@127.0.0.1:9999|stats socket $work/haproxy.sock|" \
  -e "s|:50051\" resolvers|:$port\" resolvers|" \
  -e "s|:8000\" resolvers|:$http_port\" resolvers|" "$work/k8s-haproxy.cfg" >"$work/live.cfg"
[ "$(grep -c "stand-in\|$proxy\|$http_proxy\|haproxy.sock\|:$port\" resolvers\|:$http_port\" resolvers" "$work/live.cfg")" -eq 6 ] ||
  fail "could not point the k8s haproxy.cfg at loopback: $(diff "$work/k8s-haproxy.cfg" "$work/live.cfg")"
step "haproxy with the ConfigMap's haproxy.cfg (nameserver, listen addresses and port moved to loopback)"
POD_NAMESPACE=default haproxy -f "$work/live.cfg" >"$work/haproxy.log" 2>&1 &
haproxy_pid=$!
logs="haproxy dns pod1 pod2 pod3"

# slots [BACKEND]: the template's servers that are UP, as their addresses ("127.0.0.1
# 127.0.0.3"); BACKEND defaults to the gRPC one.
slots() {
  "$py" - "$work/haproxy.sock" "${1:-attnserve}" <<'PY' 2>/dev/null || true
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(f"show servers state {sys.argv[2]}\n".encode())
out = b""
while chunk := s.recv(65536):
    out += chunk
up = sorted(f[4] for f in (l.split() for l in out.decode().splitlines())
            if len(f) > 6 and f[0].isdigit() and f[5] == "2")
print(" ".join(up))
PY
}
wait_slots() {
  local want=$1 got="" deadline=$((SECONDS + $2)) backend=${3:-attnserve}
  while [ "$SECONDS" -lt "$deadline" ]; do
    got=$(slots "$backend")
    [ "$got" = "$want" ] && return 0
    kill -0 "$haproxy_pid" 2>/dev/null || fail "haproxy exited"
    sleep 0.2
  done
  fail "HAProxy's UP servers of $backend are '$got' after $2 s, expected '$want'"
}
step "the server-template slots fill from DNS and pass the gRPC health check"
wait_slots "127.0.0.1 127.0.0.2 127.0.0.3" 20
[ "$("$client_bin" --server="$proxy" health)" = SERVING ] || fail "health through the proxy"
step "the HTTP API's slots fill too and pass GET /health"
wait_slots "127.0.0.1 127.0.0.2 127.0.0.3" 20 attnserve_http
curl -sS -f -o "$work/http.out" -H 'content-type: application/json' \
  -d '{"prompt":"Pod","max_tokens":4}' "http://$http_proxy/v1/completions" ||
  fail "a completion through the HTTP proxy: $(cat "$work/http.out" 2>/dev/null)"
for n in 1 2 3 4 5 6; do
  "$client_bin" --server="$proxy" generate --max_tokens=4 "Pod $n." >/dev/null 2>"$work/gen.err" ||
    fail "generate through the proxy: $(cat "$work/gen.err")"
done

step "a replica that leaves the DNS answer (not ready, deleted) leaves the rotation"
echo "127.0.0.1 127.0.0.3" >"$work/dns-answer"
wait_slots "127.0.0.1 127.0.0.3" 20
stop "${pids[2]}"
pids[2]=""
for n in 1 2 3 4; do
  "$client_bin" --server="$proxy" generate --max_tokens=4 "Two left $n." >/dev/null 2>"$work/gen.err" ||
    fail "generate through the proxy with two replicas: $(cat "$work/gen.err")"
done
step "all checks passed (no cluster ran these manifests: offline checks, HAProxy with a stand-in DNS)"
