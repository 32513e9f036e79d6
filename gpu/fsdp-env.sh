#!/usr/bin/env bash
# fsdp-env.sh: ./fsdp with the bundle's libraries, for a caller that must not load them itself (the
# FSDP2 benchmark's Python, which run.sh starts with the machine's own libraries).
exec env LD_LIBRARY_PATH="${FSDP_BUNDLE_LD_LIBRARY_PATH:?set by run.sh}" "$(dirname "$0")/fsdp" "$@"
