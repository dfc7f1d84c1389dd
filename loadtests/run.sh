#!/usr/bin/env sh
# Headless load test with figures: see loadtests/run.py (--help). Example:
#   loadtests/run.sh --servers 3 --memories 10000 --users 16 --seconds 60 --csv /tmp/load3/locust
set -eu
cd "$(dirname "$0")/.."
exec .venv/bin/python -m loadtests.run "$@"
