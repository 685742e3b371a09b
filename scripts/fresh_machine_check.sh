#!/usr/bin/env bash
# CI step: the README's two commands on a fresh machine, in a clean container.
#
#   scripts/fresh_machine_check.sh JUNIT_XML
#
# Starts a container from the bare python:3.11-slim image (Python and pip,
# nothing else), copies this clone in and runs, as root there, the two commands
# of the README's section "The two commands", taken from the README itself: the
# demo must finish, the test command must pass. The container shares the
# host's network only to reach the package registries (pip, apt) and the host's
# MariaDB (SRCRAWL_TEST_MYSQL_URL, default mysql://root@127.0.0.1:3306/test).
# The test run's JUnit report is copied to JUNIT_XML. The engine comes from
# scripts/docker_engine.sh; the container and dockerd are removed on exit.
set -euo pipefail
STEP="fresh machine"
# shellcheck source=scripts/docker_engine.sh
. "$(dirname "$0")/docker_engine.sh"
cd "$ROOT"
JUNIT=${1:?usage: scripts/fresh_machine_check.sh JUNIT_XML}
MYSQL_URL=${SRCRAWL_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}
NAME=srcrawl-fresh-$$

# The README's two commands: the first line of each sh block of that section.
mapfile -t COMMANDS < <(awk '/^## The two commands/{on=1; next} on && /^## /{exit}
  on && /^```sh/{block=1; next} block && /^```/{block=0; next} block{print; block=0}' README.md)
[ ${#COMMANDS[@]} = 2 ] || die "README.md's \"The two commands\" has ${#COMMANDS[@]} sh blocks, not 2"

cleanup() {
  local rc=$?
  docker rm -f "$NAME" >/dev/null 2>&1 || true
  engine_stop
  exit "$rc"
}
trap cleanup EXIT
engine_start

# No --init: process 1 (`sleep`) reaps no orphans, as in a container run without
# one, so a killed daemonized server stays a zombie and must not be taken for a
# live one. --cap-add SYS_ADMIN: root on a machine may make a mount namespace (the
# health tests show a read-only volume to root through a read-only bind mount,
# `unshare -m`), which Docker's default capabilities refuse inside a container
docker run -d --cap-add SYS_ADMIN --name "$NAME" --network host -w /src \
  -e SRCRAWL_TEST_MYSQL_URL="$MYSQL_URL" -e PYTEST_ADDOPTS="--junitxml=/tmp/junit.xml" \
  python:3.11-slim sleep infinity >/dev/null
# the clone as git has it (what a user clones), without this machine's caches
git ls-files -z | tar --null -T - -cf - | docker exec -i "$NAME" tar -xf - -C /src

for cmd in "${COMMANDS[@]}"; do
  say "running: $cmd"
  t0=$(date +%s.%N)
  log="$TRIAL_DIR/fresh-$(echo "$cmd" | tr -c 'a-z' '_' | cut -c1-40).log"
  if ! docker exec "$NAME" sh -c "$cmd" >"$log" 2>&1; then
    tail -60 "$log"
    docker cp "$NAME:/tmp/junit.xml" "$JUNIT" 2>/dev/null || true
    die "'$cmd' failed in a clean python:3.11-slim container after $(since "$t0") s"
  fi
  tail -3 "$log"
  say "'$cmd' passed in $(since "$t0") s"
done
docker cp "$NAME:/tmp/junit.xml" "$JUNIT"
