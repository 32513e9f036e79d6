#!/usr/bin/env bash
# Makes sure the Debian packages fsdp builds, tests and runs with are installed.
# Used by `make run`, `make test` and CI. Silent and fast (one dpkg-query, no apt) when
# everything is there. Otherwise: as root it installs exactly the missing packages; as
# anyone else it prints the command to run and exits 1.
# `deps.sh test` adds what only the tests use: a headless chromium, for the test that drives
# the HTML view in a browser. It is optional: where it cannot be installed (not root, not in
# this Debian) deps.sh says so and goes on, and that test says it skipped.
# FSDP_DEPS_EXTRA="pkg ..." adds packages to the list (used to test the missing path).
set -euo pipefail

packages=(build-essential libncurses-dev libcriterion-dev libopenblas-dev zlib1g-dev
          libcjson-dev dataset-fashion-mnist fortunes tmux librsvg2-bin libopenmpi-dev openmpi-bin)
# shellcheck disable=SC2206 # word splitting of the override is intended
packages+=(${FSDP_DEPS_EXTRA:-})
# The tests' browser, lightest first: the headless shell needs no GTK (about 70 MB less than
# the full browser); chromium is the fallback where the shell is not packaged.
browsers=(chromium-headless-shell chromium)
want_browser=0
[[ ${1:-} == test ]] && want_browser=1

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
done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" "${browsers[@]}" \
             2>/dev/null || true)

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

need_browser=$want_browser
for pkg in "${browsers[@]}"; do
    if [[ -n ${installed[$pkg]:-} ]]; then need_browser=0; fi
done

[[ ${#missing[@]} -eq 0 && $need_browser -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
    if [[ $need_browser -eq 1 ]]; then
        echo "no chromium for the browser test (it will skip); to run it: sudo apt-get install" \
             "-y ${browsers[0]}" >&2
    fi
    [[ ${#missing[@]} -eq 0 ]] && exit 0
    echo "missing Debian packages: ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi

apt-get update -qq >/dev/null
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi
if [[ $need_browser -eq 1 ]]; then
    for pkg in "${browsers[@]}"; do
        echo "installing, for the tests: $pkg"
        if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
               "$pkg" >/dev/null 2>&1; then
            exit 0
        fi
        echo "deps.sh: could not install $pkg" >&2
    done
    echo "deps.sh: no chromium could be installed: the browser test will skip" >&2
fi
