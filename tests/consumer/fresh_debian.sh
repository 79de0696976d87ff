#!/usr/bin/env bash
# ctest's consumer_minimal_debian: runs minimal_debian.sh in a fresh Debian 12
# root file system (../shared/tools/fresh-debian) made from the repository's
# committed state. Exits 77 (skipped) where that cannot run: not root, no
# fresh-debian beside the project, or already inside a chroot (the README's
# commands are themselves checked in one).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
tool=$repo/../shared/tools/fresh-debian
if [ "$(id -u)" -ne 0 ] || [ ! -x "$tool" ]; then
  echo "consumer_minimal_debian: skipped (needs root and $tool)"; exit 77
fi
if ischroot; then  # debianutils: 0 = in a chroot
  echo "consumer_minimal_debian: skipped (inside a chroot)"; exit 77
fi
# fresh-debian finds the Debian mirror by grepping /etc/apt/sources.list and
# sources.list.d together, and stops silently when the former is missing (as
# on machines that use only deb822 .sources files); an empty one is harmless.
[ -e /etc/apt/sources.list ] || touch /etc/apt/sources.list
# Passes only on minimal_debian.sh's last line, never on a silent exit.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
"$tool" "$repo" -- 'bash tests/consumer/minimal_debian.sh' 2>&1 | tee "$log" || rc=$?
grep -q '^minimal_debian: the service built and ran' "$log" || { echo "consumer_minimal_debian: failed (exit $rc)"; exit 1; }
