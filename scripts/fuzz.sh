#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser that reads bytes from outside the process
# (docs/hardening/fuzzing.md): builds the cargo-fuzz targets in fuzz/ with AddressSanitizer
# (cargo-fuzz's default) and runs each in turn for the given time, from its kept inputs
# (fuzz/regressions/<target>, read only) and its corpus (fuzz/corpus/<target>, grown by the
# run, ignored by git). Prints per target the executions, executions per second, coverage and
# whether it found a crash (kept under fuzz/artifacts/<target>/; minimize with
# `cargo fuzz tmin <target> <file>`, then keep it in fuzz/regressions/<target>/ and fix the bug).
#
#   scripts/fuzz.sh [--dry-run] [seconds-per-target] [target ...]   (default: 600 s, every target)
#
# Needs cargo-fuzz (installed from crates.io when missing) and nothing but the stable toolchain:
# RUSTC_BOOTSTRAP=1 lets stable rustc take the nightly flags cargo-fuzz passes
# (-Zsanitizer=address, -Cpasses=sancov-module ...). FUZZ_ARGS adds libFuzzer options
# (FUZZ_ARGS="-jobs=2 -workers=2"). Exit status: 1 if any target found a crash.
set -euo pipefail
cd "$(dirname "$0")/.."

# --dry-run checks the arguments and says what would run.
dry_run=no
if [ "${1:-}" = --dry-run ]; then
  dry_run=yes
  shift
fi
secs=${1:-600}
shift || true
case "$secs" in
  '' | *[!0-9]*) echo "scripts/fuzz.sh: seconds-per-target must be a number, not $secs" >&2; exit 2 ;;
esac
if [ $# -gt 0 ]; then
  targets=("$@")
  for t in "${targets[@]}"; do
    if [ ! -f "fuzz/fuzz_targets/$t.rs" ]; then
      echo "scripts/fuzz.sh: no target $t (see fuzz/fuzz_targets/)" >&2
      exit 2
    fi
  done
else
  targets=()
  for f in fuzz/fuzz_targets/*.rs; do
    t=${f##*/}
    targets+=("${t%.rs}")
  done
fi
if [ "$dry_run" = yes ]; then
  echo "would fuzz ${targets[*]} for ${secs} s each"
  exit 0
fi

export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz from crates.io (cargo install cargo-fuzz)..."
  cargo install -q --locked cargo-fuzz
fi

# Release code with debug assertions (overflow checks, debug_assert!): what the fuzzer must
# not trip either.
build=(-O --debug-assertions)
echo "building ${#targets[@]} targets (AddressSanitizer, coverage instrumentation)"
for t in "${targets[@]}"; do
  cargo fuzz build "${build[@]}" "$t"
done

logs=target/fuzz-logs
mkdir -p "$logs"
summary=()
failed=0
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/regressions/$t"
  log="$logs/$t.log"
  echo "== $t: ${secs}s (log: $log)"
  set +e
  # -timeout: an input that runs 60 s is a hang (a body's own waits are bounded at 2 s; 10 s
  # reported a 17-s stall of a starved process on a loaded host as one).
  cargo fuzz run "${build[@]}" "$t" "fuzz/corpus/$t" "fuzz/regressions/$t" -- \
    -max_total_time="$secs" -timeout=60 -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
  corpus=$(find "fuzz/corpus/$t" -type f | wc -l)
  if [ $rc -eq 0 ]; then
    result=clean
  else
    result="CRASH (exit $rc): $(grep -o 'Test unit written to .*' "$log" | tail -1 | sed 's/Test unit written to //')"
    failed=1
  fi
  line=$(printf '%-16s %12s execs %8s/s  %-22s corpus %6s  %s' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$corpus" "$result")
  echo "$line"
  summary+=("$line")
done

echo
echo "== summary (${secs}s per target)"
printf '%s\n' "${summary[@]}"
exit $failed
