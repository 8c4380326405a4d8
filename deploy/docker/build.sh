#!/usr/bin/env bash
# Build the Braid image on this machine, with everything it needs:
#
#   deploy/docker/build.sh            # as root
#
# 1. installs Debian's docker.io, docker-compose (v1) and debootstrap if missing (apt);
# 2. starts dockerd in the background if no engine answers (for machines without
#    systemd), logging to $BRAID_DOCKERD_LOG, and waits for it with a deadline;
# 3. makes the base image $BRAID_BASE_IMAGE (Debian bookworm + python3 + venv) with
#    debootstrap and `docker import`, once: an existing image is kept.  This is for
#    machines that reach Debian's and PyPI's mirrors but no image registry; with a
#    registry, `docker build -f deploy/Dockerfile .` uses the public python base instead;
# 4. builds $BRAID_IMAGE from deploy/Dockerfile on that base (network "host", so the
#    build reaches the package mirrors the host reaches).
#
# Every step says what it does; running it again redoes only step 4 (Docker's layer
# cache makes that quick).  It exits non-zero, with dockerd's log, when no engine can start.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BASE_IMAGE="${BRAID_BASE_IMAGE:-braid-base:bookworm}"
IMAGE="${BRAID_IMAGE:-braid:latest}"
MIRROR="${BRAID_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DOCKERD_LOG="${BRAID_DOCKERD_LOG:-/var/log/braid-dockerd.log}"
DOCKERD_DEADLINE="${BRAID_DOCKERD_DEADLINE:-60}"   # seconds

say() { echo "braid-docker: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# The engine's own client (Debian's /usr/bin/docker) first: a newer client found
# earlier on PATH may expect a newer engine.
DOCKER=docker
[ -x /usr/bin/docker ] && DOCKER=/usr/bin/docker

# -- 1. packages --------------------------------------------------------------------
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing ${missing[*]}: run as root, or install them"
  say "installing ${missing[*]} (apt)"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
  [ -x /usr/bin/docker ] && DOCKER=/usr/bin/docker
else
  say "docker.io, docker-compose and debootstrap are installed"
fi

# -- 2. the engine ------------------------------------------------------------------
if "$DOCKER" info >/dev/null 2>&1; then
  say "a Docker engine answers"
else
  say "starting dockerd in the background (log: $DOCKERD_LOG)"
  # setsid: dockerd outlives this script and the shell that ran it
  setsid dockerd >>"$DOCKERD_LOG" 2>&1 < /dev/null &
  dockerd_pid=$!
  deadline=$((SECONDS + DOCKERD_DEADLINE))
  until "$DOCKER" info >/dev/null 2>&1; do
    if ! kill -0 "$dockerd_pid" 2>/dev/null; then
      tail -n 30 "$DOCKERD_LOG" >&2 || true
      die "dockerd exited while starting (log above: $DOCKERD_LOG)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 30 "$DOCKERD_LOG" >&2 || true
      die "dockerd did not answer within ${DOCKERD_DEADLINE}s (log above: $DOCKERD_LOG)"
    fi
    sleep 0.5
  done
  say "dockerd (pid $dockerd_pid) answers"
fi

# -- 3. the local base image --------------------------------------------------------
if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  say "base image $BASE_IMAGE exists: kept"
else
  say "making base image $BASE_IMAGE: debootstrap bookworm (minbase + python3, venv) from $MIRROR"
  rootfs="$(mktemp -d /var/tmp/braid-base.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$rootfs" "$MIRROR" >"$rootfs.debootstrap.log" 2>&1 \
    || { tail -n 30 "$rootfs.debootstrap.log" >&2; die "debootstrap failed (log above)"; }
  rm -f "$rootfs.debootstrap.log"
  # Trust what the host trusts: a host behind a TLS-inspecting proxy keeps its extra CAs in
  # /usr/local/share/ca-certificates, and the image's pip must reach PyPI through it too.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    say "adding the host's local CAs to the base image"
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates >/dev/null
  fi
  # pip in a venv carries its own CA bundle; the system's is the one kept up to date above
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
  chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
  tar -C "$rootfs" -c . | "$DOCKER" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  say "base image $BASE_IMAGE made"
fi

# -- 4. the Braid image -------------------------------------------------------------
say "building $IMAGE from deploy/Dockerfile on $BASE_IMAGE"
DOCKER_BUILDKIT=0 "$DOCKER" build --network host --build-arg "BASE=$BASE_IMAGE" \
  -f "$ROOT/deploy/Dockerfile" -t "$IMAGE" "$ROOT"
say "$IMAGE built; run it with: docker-compose -f deploy/compose.yaml up -d --no-build"
