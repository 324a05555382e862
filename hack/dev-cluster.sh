#!/usr/bin/env bash
# dev-cluster.sh — a local Kubernetes API server with KubeRay's and Kueue's CRDs and the KubeRay
# v1.7 emulator, to run `raygate controller` against and create objects by hand.
#
#   hack/dev-cluster.sh [start]   build/install what is missing, start everything, print usage
#   hack/dev-cluster.sh stop      stop the emulator, the API server and etcd (by their pid files)
#   hack/dev-cluster.sh status    show what runs
#   hack/dev-cluster.sh clean     stop, then delete the state directory (etcd data, certificates)
#
# The server is k8s.io/apiextensions-apiserver + etcd (hack/install-test-apiserver.sh builds them,
# the same ones the integration tests use). It serves custom resources only: no Pods, no
# Namespaces, no API discovery, so kubectl does not work; use `raygate dev apply` / `raygate dev
# get`. Namespaced custom resources work in any namespace without a Namespace object.
#
# Environment:
#   RAYGATE_DEV_DIR                state directory (default /tmp/raygate-dev)
#   RAYGATE_CACHE_DIR              where install-test-apiserver.sh installs (default ~/.cache/raygate)
#   RAYGATE_SHARED_DIR             directory holding upstream-crds/ (default <repo>/../shared)
#   RAYGATE_DEV_START_DELAY_MS     emulated pod start time of the emulator (default 2000)
{
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${RAYGATE_DEV_DIR:-/tmp/raygate-dev}"
CACHE="${RAYGATE_CACHE_DIR:-${HOME:?HOME is not set}/.cache/raygate}"
BIN="$CACHE/test-apiserver/bin"
SHARED="${RAYGATE_SHARED_DIR:-$REPO/../shared}"
START_DELAY_MS="${RAYGATE_DEV_START_DELAY_MS:-2000}"
RAYGATE="$DIR/bin/raygate"
KUBECONFIG_PATH="$DIR/kubeconfig"
CRDS=(
    ray.io_rayservices.yaml
    ray.io_rayclusters.yaml
    kueue.x-k8s.io_resourceflavors.yaml
    kueue.x-k8s.io_cohorts.yaml
    kueue.x-k8s.io_clusterqueues.yaml
    kueue.x-k8s.io_localqueues.yaml
    kueue.x-k8s.io_workloadpriorityclasses.yaml
    kueue.x-k8s.io_workloads.yaml
)

log() { printf 'dev-cluster: %s\n' "$*"; }
STARTING=0
die() {
    printf 'dev-cluster: error: %s\n' "$*" >&2
    # a failed start leaves nothing running
    if [[ $STARTING == 1 ]]; then
        STARTING=0
        stop_all
    fi
    exit 1
}

# alive NAME: the process in $DIR/NAME.pid runs
alive() {
    local f="$DIR/$1.pid"
    [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

# stop_one NAME: SIGTERM, then SIGKILL after 10 s
stop_one() {
    local f="$DIR/$1.pid" pid
    [[ -f $f ]] || return 0
    pid="$(cat "$f")"
    if kill -0 "$pid" 2>/dev/null; then
        log "stopping $1 (pid $pid)"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "$1 did not stop on SIGTERM; killing"
            kill -9 "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$f"
}

stop_all() {
    stop_one emulator
    stop_one apiserver
    stop_one etcd
}

# a loopback port nothing listens on
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    die "no free loopback port found"
}

# CA, serving and client certificates (X.509 v3, PKCS#8 keys), as testing/src/apiserver.rs makes them
make_certs() {
    local d="$DIR/pki"
    [[ -f $d/admin.crt && -f $d/server.crt ]] && return 0
    log "generating certificates in $d"
    mkdir -p "$d"
    (
        cd "$d"
        openssl ecparam -name prime256v1 -genkey -noout -out ca.key
        openssl req -x509 -new -key ca.key -subj /CN=raygate-dev-ca -days 365 -out ca.crt
        printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n' >server.ext
        printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >client.ext
        for who in server admin; do
            if [[ $who == server ]]; then subj=/CN=127.0.0.1 ext=server.ext; else subj=/O=system:masters/CN=admin ext=client.ext; fi
            openssl ecparam -name prime256v1 -genkey -noout -out "$who.ec"
            openssl pkcs8 -topk8 -nocrypt -in "$who.ec" -out "$who.key"
            openssl req -new -key "$who.key" -subj "$subj" -out "$who.csr"
            openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile "$ext" -out "$who.crt"
        done
    ) >"$DIR/openssl.log" 2>&1 || die "openssl failed; see $DIR/openssl.log"
}

write_kubeconfig() {
    local url=$1 d="$DIR/pki"
    cat >"$KUBECONFIG_PATH" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: raygate-dev
  cluster:
    server: $url
    certificate-authority: $d/ca.crt
users:
- name: admin
  user:
    client-certificate: $d/admin.crt
    client-key: $d/admin.key
contexts:
- name: raygate-dev
  context: {cluster: raygate-dev, user: admin}
current-context: raygate-dev
EOF
}

server_url() { sed -n 's/^ *server: //p' "$KUBECONFIG_PATH"; }

wait_ready() {
    local url=$1 d="$DIR/pki"
    for _ in $(seq 600); do
        if curl -sf --cacert "$d/ca.crt" --cert "$d/admin.crt" --key "$d/admin.key" "$url/healthz" >/dev/null 2>&1; then
            return 0
        fi
        alive apiserver || die "the API server exited; see $DIR/apiserver.log"
        sleep 0.1
    done
    die "the API server was not ready within 60 s; see $DIR/apiserver.log"
}

build_raygate() {
    log "building raygate (cargo build --bin raygate)"
    (cd "$REPO" && cargo build --quiet --bin raygate) || die "cargo build failed"
    local target="${CARGO_TARGET_DIR:-$REPO/target}"
    [[ $target = /* ]] || target="$REPO/$target"
    mkdir -p "$DIR/bin"
    # a copy: later builds in the repository do not swap the running emulator's binary
    cp "$target/debug/raygate" "$RAYGATE.new" && mv "$RAYGATE.new" "$RAYGATE"
}

start() {
    command -v openssl >/dev/null || die "openssl is required"
    command -v curl >/dev/null || die "curl is required"
    [[ -d $SHARED/upstream-crds ]] || die "$SHARED/upstream-crds is missing (set RAYGATE_SHARED_DIR)"
    mkdir -p "$DIR"
    if alive etcd && alive apiserver && alive emulator; then
        log "already running"
        usage_text
        return 0
    fi
    stop_all
    STARTING=1
    trap 'die "command failed at line $LINENO"' ERR

    log "installing the API server (hack/install-test-apiserver.sh)"
    "$REPO/hack/install-test-apiserver.sh"
    [[ -x $BIN/etcd && -x $BIN/apiextensions-apiserver ]] || die "$BIN/etcd or $BIN/apiextensions-apiserver is missing after install"
    build_raygate
    make_certs

    # the ports of the last start when still free (etcd keeps its peer URL in its data)
    local client_port="" peer_port="" api_port=""
    # shellcheck disable=SC1091
    [[ -f $DIR/ports ]] && source "$DIR/ports"
    for v in client_port peer_port api_port; do
        if [[ -z ${!v} ]] || (exec 3<>"/dev/tcp/127.0.0.1/${!v}") 2>/dev/null; then
            printf -v "$v" '%s' "$(free_port)"
        fi
    done
    printf 'client_port=%s\npeer_port=%s\napi_port=%s\n' "$client_port" "$peer_port" "$api_port" >"$DIR/ports"
    local etcd_url="http://127.0.0.1:$client_port" url="https://127.0.0.1:$api_port"
    write_kubeconfig "$url"

    log "starting etcd on $etcd_url (data in $DIR/etcd)"
    nohup "$BIN/etcd" --data-dir "$DIR/etcd" \
        --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
        --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-cluster "default=http://127.0.0.1:$peer_port" \
        --unsafe-no-fsync --log-level warn >"$DIR/etcd.log" 2>&1 &
    echo $! >"$DIR/etcd.pid"

    log "starting the API server on $url"
    nohup "$BIN/apiextensions-apiserver" --etcd-servers "$etcd_url" --bind-address 127.0.0.1 --secure-port "$api_port" \
        --cert-dir "$DIR/pki/serving" --tls-cert-file "$DIR/pki/server.crt" --tls-private-key-file "$DIR/pki/server.key" \
        --client-ca-file "$DIR/pki/ca.crt" \
        --authentication-kubeconfig "$KUBECONFIG_PATH" --authorization-kubeconfig "$KUBECONFIG_PATH" --kubeconfig "$KUBECONFIG_PATH" \
        --authentication-skip-lookup --enable-priority-and-fairness=false \
        --disable-admission-plugins=NamespaceLifecycle,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,MutatingAdmissionPolicy \
        >"$DIR/apiserver.log" 2>&1 &
    echo $! >"$DIR/apiserver.pid"
    wait_ready "$url"

    log "installing the ray.io and kueue.x-k8s.io CRDs (server-side apply)"
    local files=()
    for f in "${CRDS[@]}"; do files+=(-f "$SHARED/upstream-crds/$f"); done
    "$RAYGATE" dev apply --kubeconfig "$KUBECONFIG_PATH" "${files[@]}" | sed 's/^/  /'
    # established CRDs serve every verb after a moment
    for kind in rayservices rayclusters resourceflavors clusterqueues localqueues workloads; do
        for i in $(seq 100); do
            "$RAYGATE" dev get "$kind" -A --kubeconfig "$KUBECONFIG_PATH" >/dev/null 2>&1 && break
            [[ $i == 100 ]] && die "$kind is not served 10 s after installing its CRD"
            sleep 0.1
        done
    done

    log "starting the KubeRay v1.7 emulator (start delay ${START_DELAY_MS} ms)"
    nohup "$RAYGATE" dev kuberay-emulator --kubeconfig "$KUBECONFIG_PATH" --start-delay-ms "$START_DELAY_MS" \
        >"$DIR/emulator.log" 2>&1 &
    echo $! >"$DIR/emulator.pid"
    sleep 0.5
    alive emulator || die "the emulator exited; see $DIR/emulator.log"
    STARTING=0
    trap - ERR
    usage_text
}

usage_text() {
    cat <<EOF

Dev cluster running at $(server_url)
  kubeconfig:  $KUBECONFIG_PATH
  logs:        $DIR/{etcd,apiserver,emulator}.log
  raygate:     $RAYGATE (a copy of this checkout's build; 'cargo run -q --' works too)

Run raygate's controller against it (from $REPO):
  KUBECONFIG=$KUBECONFIG_PATH cargo run -- controller --metrics-addr 127.0.0.1:8080

Create and read objects (kubectl needs API discovery, which this server lacks):
  $RAYGATE dev apply --kubeconfig $KUBECONFIG_PATH -f config/samples/resourceflavor.yaml -f config/samples/clusterqueue.yaml -f config/samples/localqueue.yaml -f config/samples/rayservice.yaml
  $RAYGATE dev get rayservices -n serving --kubeconfig $KUBECONFIG_PATH
  $RAYGATE dev get rayclusters -n serving --kubeconfig $KUBECONFIG_PATH
  $RAYGATE dev get workloads -A --kubeconfig $KUBECONFIG_PATH
(or export KUBECONFIG=$KUBECONFIG_PATH and drop --kubeconfig)

Stop:      $0 stop      (state is kept: the next start reuses etcd's data)
Clean up:  $0 clean
EOF
}

status() {
    for n in etcd apiserver emulator; do
        if alive "$n"; then echo "$n: running (pid $(cat "$DIR/$n.pid"))"; else echo "$n: stopped"; fi
    done
    [[ -f $KUBECONFIG_PATH ]] && echo "kubeconfig: $KUBECONFIG_PATH ($(server_url))"
    return 0
}

case "${1:-start}" in
start) start ;;
stop) stop_all ;;
status) status ;;
clean)
    stop_all
    log "removing $DIR"
    rm -rf "$DIR"
    ;;
-h | --help | help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' ;;
*) die "unknown command ${1}; use start, stop, status or clean" ;;
esac
exit 0
}
