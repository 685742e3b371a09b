#!/usr/bin/env bash
# CI step: the compose stack run for real on a Docker engine of this machine.
#
#   scripts/compose_check.sh [PYTHON]
#
# PYTHON (default python3) has srcrawl and its test extras installed:
# scripts/compose_check.py runs with it. The engine comes from
# scripts/docker_engine.sh (root, Debian/Ubuntu); srcrawl's image is built with
# the host's network (pip), then the checks run. The stack and dockerd are
# stopped on exit, whatever happened. SRCRAWL_CI_TIMINGS: a file for the timings.
set -euo pipefail
STEP="compose check"
# shellcheck source=scripts/docker_engine.sh
. "$(dirname "$0")/docker_engine.sh"
cd "$ROOT"
PY=${1:-python3}
PROJECT=srcrawlci
FILES=(-f docker-compose.yml -f scripts/compose.ci.yml)
ALL=(--profile demo --profile ci-web --profile replicated)
t_start=$(date +%s.%N)

cleanup() {
  local rc=$?
  if docker info >/dev/null 2>&1; then
    docker-compose -p "$PROJECT" "${FILES[@]}" "${ALL[@]}" logs --no-color --tail 40 \
      >"$TRIAL_DIR/compose-logs.txt" 2>&1 || true
    [ "$rc" = 0 ] || { say "last log lines of the stack:"; tail -150 "$TRIAL_DIR/compose-logs.txt"; }
    docker-compose -p "$PROJECT" "${FILES[@]}" "${ALL[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  engine_stop
  say "the step took $(since "$t_start") s"
  exit "$rc"
}
trap cleanup EXIT
engine_start

t0=$(date +%s.%N)
docker build --network host -t srcrawl:ci . >"$TRIAL_DIR/build.log" 2>&1 \
  || { tail -30 "$TRIAL_DIR/build.log"; die "docker build failed"; }
build_s=$(since "$t0")
say "srcrawl image built in $build_s s"

docker-compose -p "$PROJECT" "${FILES[@]}" "${ALL[@]}" down -v --remove-orphans >/dev/null 2>&1
# free loopback ports for what the stack publishes: the portal and the two object
# stores' S3 gateways (at most 55535, as SeaweedFS's own ports must be)
read -r PORTAL_PORT S3_PORT S3_REPLICATED_PORT < <("$PY" - <<'PORTS'
import socket
held = []
while len(held) < 3:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    (held if s.getsockname()[1] <= 55535 else []).append(s)
print(*(s.getsockname()[1] for s in held))
PORTS
)
export PORTAL_PORT S3_PORT S3_REPLICATED_PORT
report=${SRCRAWL_CI_TIMINGS:-$TRIAL_DIR/compose-timings.json}
"$PY" scripts/compose_check.py "${FILES[@]}" --project "$PROJECT" --portal-port "$PORTAL_PORT" \
  --slaves 4 --image-build-s "$build_s" --report "$report"
