#!/usr/bin/env bash
# Runs the itc CLI on the vectors of docs/itc-wire-format.md.
set -u
itc="$1"
failures=0

expect() {  # expect OUTPUT command...
  local want="$1"
  shift
  local got
  got="$("$itc" "$@" 2>/dev/null)"
  if [[ "$got" != "$want" ]]; then
    echo "FAIL: itc $* -> '$got', want '$want'"
    failures=$((failures + 1))
  fi
}

expect_error() {  # expect_error command...: non-zero exit and a message on stderr
  local err
  if err="$("$itc" "$@" 2>&1 >/dev/null)"; then
    echo "FAIL: itc $* succeeded"
    failures=$((failures + 1))
  elif [[ -z "$err" ]]; then
    echo "FAIL: itc $* printed no error"
    failures=$((failures + 1))
  fi
}

expect 20 encode party 1
expect 88 encode party "(1,0)"
expect c480 encode party "(1,(0,1))"
expect e0 encode version 0
expect 9a encode version 5
expect 52ea encode version "(1,0,(0,1,0))"
expect 1 decode party 20
expect "(1,0)" decode party 88
expect "(1,(0,1))" decode party c480
expect 0 decode version e0
expect 5 decode version 9a
expect "(1,0,(0,1,0))" decode version 52ea
expect "(1,0,(0,1,0))" join "(1,0,(0,1,0))" "(0,1,0)"
expect "(0,1,0)" meet "(1,0,(0,1,0))" "(0,1,0)"
expect true leq "(0,1,0)" "(1,0,(0,1,0))"
expect false leq "(1,0,(0,1,0))" "(0,1,0)"
expect true concurrent "(0,1,0)" "(0,0,1)"
expect 1 tick 1 0
expect "(0,1,0)" tick "(1,0)" 0
expect 5 min-ticks 5
expect 2 min-ticks "(0,(0,1,0),(0,0,1))"
expect $'(1,0)\n(0,1)' fork 1
expect "5" rank 5

expect_error decode party 2000
expect_error decode party 00
expect_error decode party c2
expect_error decode version e000
expect_error decode version 57
expect_error decode version zz
expect_error encode party "(1,"
expect_error encode party 0
expect_error encode version "(1,2)"
expect_error tick "(1,1" 0
expect_error bogus

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "itc cli: all vectors pass"
