#!/usr/bin/env bash
# Long fuzz run: every cargo-fuzz target of fuzz/ for SECONDS each (default 300), then each
# corpus minimized (cargo fuzz cmin). Needs a nightly toolchain (rustup toolchain install
# nightly); installs cargo-fuzz when missing. A crash stops the run with libFuzzer's report; the
# input is under fuzz/artifacts/<target>/ (fix the parser, then add the input to the corpus).
#
#   scripts/fuzz.sh [seconds-per-target]     e.g. scripts/fuzz.sh 60
#   TARGETS="ws_query color" scripts/fuzz.sh  only these targets
#
# The checked-in corpora also run as plain tests (tests/inputs/fuzz_corpus.rs of shared, core-publisher,
# ws-node and gateway) under stable `cargo test`.
set -euo pipefail

secs="${1:-300}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/fuzz"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz
fi

targets="${TARGETS:-$(cargo +nightly fuzz list)}"
echo "fuzz: building $(echo $targets | wc -w) targets"
cargo +nightly fuzz build

for t in $targets; do
  echo "fuzz: $t for ${secs}s (corpus: $(ls corpus/$t 2>/dev/null | wc -l) files)"
  mkdir -p "corpus/$t"
  # Progress: libFuzzer's pulse lines (at each power of two executions) and its final stats.
  log="$(mktemp)"
  set +e
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -print_final_stats=1 2>&1 \
    | tee "$log" | { grep --line-buffered -E 'pulse|^Done|stat::number_of_executed_units|stat::peak_rss_mb' || true; }
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log" >&2
    echo "fuzz: $t FAILED (exit $rc): the input is under fuzz/artifacts/$t/" >&2
    exit 1
  fi
  rm -f "$log"
done

# cmin keeps the smallest set of inputs that covers what the corpus covers (named by their
# SHA-1); the hand-made seed-* files are then written back and the finds that repeat one dropped.
for t in $targets; do
  before=$(ls "corpus/$t" | wc -l)
  cargo +nightly fuzz cmin "$t" "corpus/$t" >/dev/null 2>&1
  echo "fuzz: $t corpus minimized: $before -> $(ls corpus/$t | wc -l) files"
done
python3 seeds/make_seeds.py
for t in $targets; do
  for seed in corpus/$t/seed-*; do
    [ -e "$seed" ] || continue
    dup="corpus/$t/$(sha1sum "$seed" | cut -d' ' -f1)"
    if [ -e "$dup" ]; then rm -f "$dup"; fi
  done
  echo "fuzz: $t corpus with the seeds: $(ls corpus/$t | wc -l) files"
done
echo "fuzz: done; corpora in fuzz/corpus ($(du -sh corpus | cut -f1))"
