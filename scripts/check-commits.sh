#!/usr/bin/env bash
# Checks every non-merge commit after the recorded base (.githooks/base) against the
# commit style, with the same rule as the commit-msg hook. A history without the base
# (a shallow clone) cannot be checked: that is said loudly, and the check is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

base="$(tr -d '[:space:]' < .githooks/base)"
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "!!! check-commits: not a git repository; commit messages NOT checked" >&2
  exit 0
fi
if ! git cat-file -e "${base}^{commit}" 2>/dev/null; then
  echo "!!! check-commits: base ${base} is not in this history (shallow clone?);" >&2
  echo "!!! commit messages NOT checked. Fetch the full history to check them." >&2
  exit 0
fi

message="$(mktemp)"
errors="$(mktemp)"
trap 'rm -f "$message" "$errors"' EXIT
failed=0
checked=0
for commit in $(git rev-list --no-merges "${base}..HEAD"); do
  git log -1 --format=%B "$commit" > "$message"
  checked=$((checked + 1))
  if ! .githooks/commit-msg "$message" 2>"$errors"; then
    echo "commit $(git rev-parse --short "$commit"):" >&2
    cat "$errors" >&2
    failed=$((failed + 1))
  fi
done
if [ "$failed" -gt 0 ]; then
  echo "check-commits: $failed of $checked commits after ${base:0:12} break the commit style" >&2
  exit 1
fi
echo "check-commits: $checked commits after ${base:0:12} follow the commit style"
