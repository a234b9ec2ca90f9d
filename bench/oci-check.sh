#!/usr/bin/env bash
# Builds the rebound image from the Dockerfile with podman and checks that it runs, on a
# Debian 12 host without Docker (root; the recipe of /work/shared/notes/oci.md):
#   1. podman, buildah, debootstrap and runc (crun fails on this host's hybrid cgroups)
#   2. podman state in $OCI_DIR with its own storage.conf / containers.conf
#      (runtime runc, explicit ulimits: rootful podman's default of 1048576 fds is refused here)
#   3. a debootstrapped bookworm minbase imported as debian:bookworm, and a slimmed copy as
#      debian:bookworm-slim, made like the official images (no registry access needed);
#      built once and then reused
#   4. podman build --pull=never --format docker (OCI format would drop HEALTHCHECK)
#   5. checks: image metadata (user, healthcheck, ports, cmd), no missing shared library,
#      container runs with the shipped config on the host network, /healthz answers, a proxied
#      `curl -x` to a local upstream returns its body, the HEALTHCHECK command passes, the
#      process runs as uid 10001, and `podman stop` (SIGTERM) ends with exit code 0
#   6. removes the container and dangling layers; keeps the base images, the built image, its
#      build stage as $OCI_IMAGE-build (so the next build skips the compiler install) and the
#      debootstrap tarball.
# Options: --prepare  only steps 1-3 (no compile: fine while someone else is building)
#          --purge    remove all podman state under $OCI_DIR
#
# Environment: OCI_DIR=/var/tmp/rebound-oci  OCI_IMAGE=localhost/rebound:check
#              OCI_STORAGE_DRIVER=overlay (or vfs)  OCI_NO_CACHE=0 (1: podman build --no-cache)
#              OCI_BUILD_ARGS="CMAKE_BUILD_TYPE=RelWithDebInfo" (space-separated --build-arg values)
#              OCI_SKIP_BUILD=1 (check the image already built, if there is one)
# The container uses --network host, so 127.0.0.1:3128 and :9901 must be free on the host.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
D=${OCI_DIR:-/var/tmp/rebound-oci}
IMAGE=${OCI_IMAGE:-localhost/rebound:check}
DRIVER=${OCI_STORAGE_DRIVER:-overlay}
NO_CACHE=${OCI_NO_CACHE:-0}
CONTAINER=rebound-oci-check
[[ $D == /?* && $D != *..* ]] || { echo "oci-check: OCI_DIR must be an absolute path, got '$D'" >&2; exit 2; }

log() { printf 'oci-check: %s\n' "$*" >&2; }
die() { printf 'oci-check: FAILED: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root (rootful podman, debootstrap)"

if [[ ${1:-} == --purge ]]; then
  export CONTAINERS_STORAGE_CONF=$D/storage.conf CONTAINERS_CONF=$D/containers.conf
  [[ -f $D/storage.conf ]] && podman system reset -f >/dev/null 2>&1 || true
  rm -rf "$D"
  log "removed $D"
  exit 0
fi

# 1. tools -------------------------------------------------------------------------------------
missing=()
for p in podman buildah debootstrap runc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

# 2. podman configuration ----------------------------------------------------------------------
mkdir -p "$D"
cat >"$D/storage.conf" <<EOF
[storage]
driver = "$DRIVER"
graphroot = "$D/storage"
runroot = "$D/runroot"
EOF
cat >"$D/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_STORAGE_CONF=$D/storage.conf CONTAINERS_CONF=$D/containers.conf
pod() { podman "$@"; }

# 3. base images ------------------------------------------------------------------------------
# Stand-ins for the official images, made the way debuerreotype makes them: a bookworm minbase
# with the docker-clean apt hooks; the -slim one also drops docs, man pages and locales via dpkg
# path-exclude. Built once from one debootstrap; redone only when $D/base-v2 is missing.
make_base() {  # make_base VARIANT MIRROR: import docker.io/library/debian:VARIANT from the minbase tar
  local variant=$1 mirror=$2
  local r=$D/rootfs-$variant
  [[ -n $D && $r == "$D"/rootfs-* ]] || die "refusing to prepare a rootfs at '$r'"
  rm -rf "$r"
  mkdir -p "$r"
  tar --numeric-owner --xattrs -C "$r" -xf "$D/bookworm-minbase.tar"
  rm -f "$r/etc/apt/sources.list"
  mkdir -p "$r/etc/apt/sources.list.d"
  printf '%s\n' "Types: deb" "URIs: $mirror" "Suites: bookworm bookworm-updates" "Components: main" \
    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" "" \
    "Types: deb" "URIs: http://deb.debian.org/debian-security" "Suites: bookworm-security" \
    "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
    >"$r/etc/apt/sources.list.d/debian.sources"
  local clean='"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true";'
  printf '%s\n' "DPkg::Post-Invoke { $clean };" "APT::Update::Post-Invoke { $clean };" \
    'Dir::Cache::pkgcache "";' 'Dir::Cache::srcpkgcache "";' >"$r/etc/apt/apt.conf.d/docker-clean"
  if [[ $variant == *-slim ]]; then
    printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
      'path-exclude /usr/share/man/*' 'path-exclude /usr/share/groff/*' 'path-exclude /usr/share/info/*' \
      'path-exclude /usr/share/lintian/*' 'path-exclude /usr/share/linda/*' 'path-exclude /usr/share/locale/*' \
      >"$r/etc/dpkg/dpkg.cfg.d/docker"
    find "$r/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
    find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
    local dir
    for dir in man groff info lintian linda locale; do
      [[ -d $r/usr/share/$dir ]] && find "$r/usr/share/$dir" -mindepth 1 -delete
    done
  fi
  find "$r/var/cache/apt" "$r/var/lib/apt/lists" -type f -delete
  find "$r/var/log" -type f -name '*.log' -delete
  : >"$r/etc/resolv.conf"
  echo localhost >"$r/etc/hostname"
  tar --numeric-owner --xattrs -C "$r" -cf "$D/$variant.tar" .
  rm -rf "$r"
  pod rmi -f "docker.io/library/debian:$variant" >/dev/null 2>&1 || true
  log "importing docker.io/library/debian:$variant"
  pod import --quiet --change 'CMD ["bash"]' "$D/$variant.tar" "docker.io/library/debian:$variant" >/dev/null
  rm -f "$D/$variant.tar"
}

if [[ ! -e $D/base-v2 ]] || ! pod image exists docker.io/library/debian:bookworm ||
   ! pod image exists docker.io/library/debian:bookworm-slim; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  if [[ ! -s $D/bookworm-minbase.tar ]]; then
    log "debootstrap bookworm minbase from $mirror"
    rm -rf "$D/rootfs-debootstrap"
    debootstrap --variant=minbase bookworm "$D/rootfs-debootstrap" "$mirror" >"$D/debootstrap.log" 2>&1 ||
      die "debootstrap failed (see $D/debootstrap.log)"
    tar --numeric-owner --xattrs -C "$D/rootfs-debootstrap" -cf "$D/bookworm-minbase.tar.part" .
    mv "$D/bookworm-minbase.tar.part" "$D/bookworm-minbase.tar"
    rm -rf "$D/rootfs-debootstrap"
  fi
  make_base bookworm "$mirror"
  make_base bookworm-slim "$mirror"
  touch "$D/base-v2"
fi

if [[ ${1:-} == --prepare ]]; then log "base images ready in $D"; exit 0; fi

# 4. build --------------------------------------------------------------------------------------
build_args=(--pull=never --format docker --network host -t "$IMAGE")
[[ $NO_CACHE == 1 ]] && build_args+=(--no-cache)
for a in ${OCI_BUILD_ARGS:-}; do build_args+=(--build-arg "$a"); done
if [[ ${OCI_SKIP_BUILD:-0} == 1 ]] && pod image exists "$IMAGE"; then
  log "OCI_SKIP_BUILD=1: checking the existing $IMAGE"
  build_seconds="(not rebuilt)"
else
  log "podman build ${build_args[*]} $root (log: $D/build.log)"
  start=$SECONDS
  pod build "${build_args[@]}" "$root" >"$D/build.log" 2>&1 || { tail -n 40 "$D/build.log" >&2; die "podman build failed"; }
  build_seconds=$((SECONDS - start))s
  # Tag the build stage (a cache hit: no work) so the prune below keeps its layers and the
  # next run skips installing the compiler; then drop the layers of earlier builds.
  pod build "${build_args[@]/#$IMAGE/$IMAGE-build}" --target build "$root" >>"$D/build.log" 2>&1 ||
    log "could not tag the build stage (the next build will reinstall the compiler)"
  pod image prune -f >/dev/null
fi

# 5. checks -------------------------------------------------------------------------------------
size_bytes=$(pod image inspect --format '{{.Size}}' "$IMAGE")
user=$(pod image inspect --format '{{.Config.User}}' "$IMAGE")
health=$(pod image inspect --format '{{json .Config.Healthcheck.Test}}' "$IMAGE")
cmd=$(pod image inspect --format '{{json .Config.Cmd}}' "$IMAGE")
ports=$(pod image inspect --format '{{json .Config.ExposedPorts}}' "$IMAGE")
[[ $user == 10001:10001 ]] || die "image USER is '$user', expected 10001:10001"
[[ $health == *healthz* ]] || die "image has no /healthz HEALTHCHECK (got $health; built with --format docker?)"
[[ $cmd == '["rebound","--config","/etc/rebound/rebound.yaml"]' ]] || die "unexpected CMD $cmd"
[[ $ports == *3128* && $ports == *9901* ]] || die "unexpected EXPOSE $ports"

libs=$(pod run --rm --network host --no-healthcheck --entrypoint ldd "$IMAGE" /usr/local/bin/rebound)
if grep -q 'not found' <<<"$libs"; then die "missing shared libraries in the runtime image: $(grep 'not found' <<<"$libs")"; fi
version=$(pod run --rm --network host --no-healthcheck "$IMAGE" rebound --version 2>&1)
version=${version%%$'\n'*}

for port in 3128 9901; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "127.0.0.1:$port is in use on the host"; fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rebound-oci-check.XXXXXX")
upstream_pid=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  pod rm -f -t 0 "$CONTAINER" >/dev/null 2>&1 || true
  [[ -n $upstream_pid ]] && { kill "$upstream_pid" 2>/dev/null; wait "$upstream_pid" 2>/dev/null; } || true
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# An upstream on the host: Python's static file server on a free port.
echo "hello through rebound in a container" >"$tmp/hello.txt"
upstream_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$tmp" "$upstream_port" >"$tmp/upstream.log" 2>&1 &
upstream_pid=$!

pod rm -f -t 0 "$CONTAINER" >/dev/null 2>&1 || true
# podman schedules healthchecks with systemd timers, absent here: it logs "unable to get
# systemd connection to add healthchecks" (harmless) and the HEALTHCHECK is run once by hand
# below with `podman healthcheck run`.
pod run -d --name "$CONTAINER" --network host \
  --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 "$IMAGE" >/dev/null 2>"$tmp/run.err" ||
  { cat "$tmp/run.err" >&2; die "podman run failed"; }
grep -v 'systemd connection' "$tmp/run.err" >&2 || true

healthz=
for ((i = 0; i < 100; i++)); do
  healthz=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 http://127.0.0.1:9901/healthz || true)
  [[ $healthz == 200 ]] && break
  [[ $(pod inspect --format '{{.State.Running}}' "$CONTAINER") == true ]] ||
    { pod logs "$CONTAINER" >&2 || true; die "container exited during startup"; }
  sleep 0.2
done
[[ $healthz == 200 ]] || { pod logs "$CONTAINER" >&2; die "/healthz answered '$healthz', not 200"; }
readyz=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://127.0.0.1:9901/readyz || true)

for ((i = 0; i < 50; i++)); do
  (exec 3<>"/dev/tcp/127.0.0.1/$upstream_port") 2>/dev/null && break
  sleep 0.1
done
proxied=$(curl -sS --max-time 5 -x http://127.0.0.1:3128 -D "$tmp/proxied.headers" \
            -o "$tmp/proxied.body" -w '%{http_code}' "http://127.0.0.1:$upstream_port/hello.txt") ||
  { pod logs "$CONTAINER" >&2; die "curl through the container failed"; }
[[ $proxied == 200 ]] && cmp -s "$tmp/proxied.body" "$tmp/hello.txt" ||
  { cat "$tmp/proxied.headers" >&2; pod logs "$CONTAINER" >&2; die "proxied request: HTTP $proxied or wrong body"; }

health_result=$(pod healthcheck run "$CONTAINER" 2>&1) || die "the image's HEALTHCHECK command failed: $health_result"
health_result=${health_result:-healthy}
uid=$(pod exec "$CONTAINER" id -u)
[[ $uid == 10001 ]] || die "the process runs as uid $uid"
pid1_user=$(pod top "$CONTAINER" user comm | awk 'NR == 2 {print $1 " " $2}')

pod stop -t 15 "$CONTAINER" >/dev/null 2>"$tmp/stop.err" || { cat "$tmp/stop.err" >&2; die "podman stop failed"; }
grep -v 'systemd connection' "$tmp/stop.err" >&2 || true
exit_code=$(pod inspect --format '{{.State.ExitCode}}' "$CONTAINER")
pod logs "$CONTAINER" >"$tmp/container.log" 2>&1 || true

echo "image:        $IMAGE ($(numfmt --to=iec-i --suffix=B "$size_bytes"), built in ${build_seconds} with $DRIVER storage, build args: ${OCI_BUILD_ARGS:-none})"
echo "metadata:     USER $user, CMD $cmd, EXPOSE $ports, HEALTHCHECK $health"
echo "binary:       $version; shared libraries all resolved:"
sed 's/^/                /' <<<"$libs"
echo "run:          /healthz $healthz, /readyz $readyz, process '$pid1_user' (uid $uid)"
echo "proxy:        curl -x http://127.0.0.1:3128 http://127.0.0.1:$upstream_port/hello.txt -> $proxied, body matches"
sed -n 's/^/                /p' "$tmp/proxied.headers" | tr -d '\r' | grep -v '^ *$'
echo "healthcheck:  podman healthcheck run -> $health_result"
echo "stop:         podman stop (SIGTERM) -> exit code $exit_code"
echo "container log (last 5 lines):"
tail -n 5 "$tmp/container.log" | sed 's/^/                /'
[[ $exit_code == 0 ]] || die "rebound exited $exit_code on SIGTERM, expected 0"
log "OK"
