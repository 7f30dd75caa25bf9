#!/usr/bin/env bash
# Skipped tests made visible (issue 11). A test that cannot run here (not root, a tool missing)
# passes as far as libtest is concerned; tests/util/skip.rs, and this script for the shell tests,
# append "<test>: <reason>" to the file named by HX_SKIP_LOG, and this script lists that file.
#
#   tests/skips.sh COMMAND [ARG...]   runs COMMAND with HX_SKIP_LOG set to a fresh file, then
#                                     prints the summary; exits with COMMAND's status. E.g.
#                                     tests/skips.sh cargo test --workspace --release
#   tests/skips.sh --summary FILE     prints the summary of FILE: "skipped: N tests" and a line
#                                     "  <test>: <reason>" for each skip, or "skipped: none"
#   tests/skips.sh --skip NAME REASON a shell test's skip, as tests/util/skip.rs does it: with
#                                     CI=true a failure (exit 1: CI has root and every tool
#                                     .ci/run installs), else prints "skipped: NAME: REASON",
#                                     appends "NAME: REASON" to $HX_SKIP_LOG if set, exits 0
set -euo pipefail

summary() {
  local file=$1 n
  if [ ! -s "$file" ]; then
    echo "skipped: none"
    return
  fi
  # Tests, not lines: a test may skip more than one part of itself.
  n=$(sed 's/: .*//' "$file" | sort -u | wc -l)
  if [ "$n" = 1 ]; then echo "skipped: 1 test"; else echo "skipped: $n tests"; fi
  sort "$file" | sed 's/^/  /'
}

case ${1:-} in
  --summary)
    [ $# = 2 ] || { echo "usage: $0 --summary FILE" >&2; exit 2; }
    summary "$2"
    ;;
  --skip)
    [ $# = 3 ] || { echo "usage: $0 --skip NAME REASON" >&2; exit 2; }
    if [ "${CI:-}" = true ]; then
      echo "FAIL: $2: $3, and CI=true requires it" >&2
      exit 1
    fi
    echo "skipped: $2: $3"
    if [ -n "${HX_SKIP_LOG:-}" ]; then
      printf '%s: %s\n' "$2" "$3" >> "$HX_SKIP_LOG"
    fi
    ;;
  "" | -*)
    echo "usage: $0 COMMAND [ARG...] | --summary FILE | --skip NAME REASON" >&2
    exit 2
    ;;
  *)
    log=$(mktemp "${TMPDIR:-/tmp}/hx-skips.XXXXXX")
    trap 'rm -f "$log"' EXIT
    status=0
    HX_SKIP_LOG=$log "$@" || status=$?
    summary "$log"
    exit $status
    ;;
esac
