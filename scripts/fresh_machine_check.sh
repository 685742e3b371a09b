#!/usr/bin/env bash
# CI step: the README's two commands on a fresh machine, in a clean container.
#
#   scripts/fresh_machine_check.sh JUNIT_XML
#
# Starts a container from the bare python:3.11-slim image (Python and pip,
# nothing else), copies this clone in and runs, as root there, the two commands
# of the README's section "The two commands", taken from the README itself: the
# demo must finish, the test command must pass. The container is a plain one:
# Docker's default capabilities, no --init, nothing of the host's but its network,
# shared only to reach the package registries (pip, apt). The test suite starts
# its own Redis and MariaDB there, as on any machine.
# The test run's JUnit report is copied to JUNIT_XML. The engine comes from
# scripts/docker_engine.sh; the container and dockerd are removed on exit.
set -euo pipefail
STEP="fresh machine"
# shellcheck source=scripts/docker_engine.sh
. "$(dirname "$0")/docker_engine.sh"
cd "$ROOT"
JUNIT=${1:?usage: scripts/fresh_machine_check.sh JUNIT_XML}
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

# no --init, no --cap-add, no database URL: what a user's fresh container has is what
# the tests get (SRCRAWL_TEST_MYSQL_URL unset: the suite starts its own MariaDB).
# Without --init, process 1 (`sleep`) reaps no orphans, so a killed daemonized server
# stays a zombie and must not be taken for a live one.
docker run -d --name "$NAME" --network host -w /src \
  -e PYTEST_ADDOPTS="--junitxml=/tmp/junit.xml" \
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
