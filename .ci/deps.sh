#!/usr/bin/env bash
# Makes sure the Debian packages fsdp builds, tests and runs with are installed.
# Used by `make run`, `make test` and CI. Silent and fast (one dpkg-query, no apt) when
# everything is there. Otherwise: as root it installs exactly the missing packages; as
# anyone else it prints the command to run and exits 1.
# FSDP_DEPS_EXTRA="pkg ..." adds packages to the list (used to test the missing path).
set -euo pipefail

packages=(build-essential libncurses-dev libcriterion-dev libopenblas-dev zlib1g-dev
          libcjson-dev dataset-fashion-mnist tmux librsvg2-bin libopenmpi-dev openmpi-bin)
# shellcheck disable=SC2206 # word splitting of the override is intended
packages+=(${FSDP_DEPS_EXTRA:-})

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "deps.sh: not a Debian system (no dpkg-query); make sure these are installed:" \
         "${packages[*]}" >&2
    exit 0
fi

# One query for all packages; unknown names print nothing here (dpkg-query complains on
# stderr and exits 1, which is expected), so anything not listed as installed is missing.
declare -A installed=()
while read -r pkg status; do
    if [[ $status == installed ]]; then installed[$pkg]=1; fi
done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null || true)

missing=()
for pkg in "${packages[@]}"; do
    if [[ -n ${installed[$pkg]:-} ]]; then continue; fi
    # A compiler and make are what build-essential is for; accept them without the package.
    if [[ $pkg == build-essential ]] && command -v gcc >/dev/null && command -v make >/dev/null
    then
        continue
    fi
    missing+=("$pkg")
done

[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
    echo "missing Debian packages: ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi

echo "installing: ${missing[*]}"
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null
