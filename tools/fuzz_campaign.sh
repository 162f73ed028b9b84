#!/usr/bin/env bash
# A fuzzing campaign with a record: every target of fuzz/Cargo.toml in turn, for a fixed time
# each, on its corpus; what it finds minimised; a markdown summary of the run.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: tools/fuzz_campaign.sh [OPTIONS] [SECONDS [SUMMARY]]

Runs every fuzz target listed in fuzz/Cargo.toml (parse_text, decomp, onnx_import,
interp_cpu, shape_algebra, grad), one after another, for SECONDS each (default 60):

    cargo +nightly fuzz run TARGET fuzz/corpus/TARGET -- -max_total_time=SECONDS ...

New corpus entries are written to fuzz/corpus/TARGET (commit the ones worth keeping, e.g.
after `cargo fuzz cmin`). Each new artifact in fuzz/artifacts/TARGET (crash-*, leak-*,
timeout-*, oom-*) is minimised with `cargo fuzz tmin`. The summary, a markdown table (target,
seconds, executions, execs/s, new corpus entries, findings) followed by each finding's
artifact, minimised artifact and message, goes to SUMMARY (default
target/fuzz-campaign/summary.md); each target's libFuzzer log goes beside it as TARGET.log.

A target stops at its first finding (libFuzzer's default); the others still run.

Options:
  --targets A,B      only these targets (default: all of fuzz/Cargo.toml)
  --sanitizer NAME   cargo-fuzz's --sanitizer (address, the default, or none, which runs
                     several times faster and catches fewer memory errors)
  --tmin-runs N      runs of each `cargo fuzz tmin` (default 255)
  -h, --help         this text

Per-target libFuzzer flags (always added):
  interp_cpu   -entropic=0: the target executes much of the compiler, so new inputs bring
               thousands of new features and the entropic schedule's bookkeeping of rare
               features took three quarters of the time (about 45 executions per second with
               it, 200 or more without).
EOF
}

seconds=60
summary=""
targets=""
sanitizer="address"
tmin_runs=255
positional=()
while (($#)); do
    case "$1" in
        -h | --help)
            usage
            exit 0
            ;;
        --targets)
            targets="${2:?--targets needs a list}"
            shift 2
            ;;
        --sanitizer)
            sanitizer="${2:?--sanitizer needs a name}"
            shift 2
            ;;
        --tmin-runs)
            tmin_runs="${2:?--tmin-runs needs a number}"
            shift 2
            ;;
        -*)
            echo "unknown option $1 (see --help)" >&2
            exit 2
            ;;
        *)
            positional+=("$1")
            shift
            ;;
    esac
done
if ((${#positional[@]} > 2)); then
    echo "too many arguments (see --help)" >&2
    exit 2
fi
if ((${#positional[@]} >= 1)); then seconds="${positional[0]}"; fi
if ((${#positional[@]} == 2)); then summary="${positional[1]}"; fi
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
    echo "SECONDS must be a positive whole number, not '$seconds'" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
summary="${summary:-target/fuzz-campaign/summary.md}"
out_dir="$(dirname "$summary")"
mkdir -p "$out_dir"

if [[ -z "$targets" ]]; then
    targets="$(awk '/^\[\[bin\]\]/ { bin = 1; next } bin && /^name *=/ { gsub(/[" ]/, "", $0); sub(/^name=/, "", $0); print; bin = 0 }' fuzz/Cargo.toml | paste -sd, -)"
fi
IFS=',' read -r -a target_list <<<"$targets"

# Extra libFuzzer flags by target (see --help for why).
target_flags() {
    case "$1" in
        interp_cpu) echo "-entropic=0" ;;
        *) echo "" ;;
    esac
}

# Findings: the artifact kinds libFuzzer writes for a bug (slow units are not bugs).
list_artifacts() {
    local dir="fuzz/artifacts/$1"
    [[ -d "$dir" ]] || return 0
    find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) |
        sort
}

count_files() {
    if [[ -d "$1" ]]; then find "$1" -maxdepth 1 -type f | wc -l; else echo 0; fi
}

# libFuzzer's final `stat::NAME:` value in a log; failing that, the value from its last
# status line (`#RUNS ... exec/s: N ...`: NAME is `runs` or `exec/s`); `?` when neither is there.
final_stat() {
    local value
    value="$(grep -E "^stat::$1:" "$3" | tail -n 1 | awk '{ print $2 }')" || true
    if [[ -z "$value" ]]; then
        value="$(grep -E '^#[0-9]+' "$3" | tail -n 1 | awk -v want="$2" '
            want == "runs" { sub(/^#/, "", $1); print $1; exit }
            { for (i = 1; i < NF; i++) if ($i == "exec/s:") { print $(i + 1); exit } }')" || true
    fi
    echo "${value:-?}"
}

echo "building the fuzz targets (sanitizer: $sanitizer)" >&2
cargo +nightly fuzz build --sanitizer "$sanitizer" >&2

started="$(date -u '+%Y-%m-%d %H:%M UTC')"
rows=()
findings=()
for target in "${target_list[@]}"; do
    corpus="fuzz/corpus/$target"
    log="$out_dir/$target.log"
    mkdir -p "$corpus"
    before_files="$(count_files "$corpus")"
    mapfile -t before_artifacts < <(list_artifacts "$target")
    read -r -a flags <<<"$(target_flags "$target")"
    echo "fuzzing $target for $seconds s (log: $log)" >&2
    begin=$SECONDS
    status=0
    cargo +nightly fuzz run --sanitizer "$sanitizer" "$target" "$corpus" -- \
        -max_total_time="$seconds" -print_final_stats=1 ${flags[@]+"${flags[@]}"} >"$log" 2>&1 || status=$?
    ran=$((SECONDS - begin))
    executions="$(final_stat number_of_executed_units runs "$log")"
    execs_per_s="$(final_stat average_exec_per_sec exec/s "$log")"
    new_entries=$(($(count_files "$corpus") - before_files))

    new_artifacts=()
    while IFS= read -r artifact; do
        [[ -n "$artifact" ]] || continue
        if ! printf '%s\n' ${before_artifacts[@]+"${before_artifacts[@]}"} | grep -qxF "$artifact"; then
            new_artifacts+=("$artifact")
        fi
    done < <(list_artifacts "$target")
    if ((status != 0 && ${#new_artifacts[@]} == 0)); then
        findings+=("- \`$target\`: \`cargo fuzz run\` exited with status $status and left no artifact; see \`$log\`.")
    fi
    for artifact in ${new_artifacts[@]+"${new_artifacts[@]}"}; do
        tmin_log="$out_dir/$target.$(basename "$artifact").tmin.log"
        echo "minimising $artifact (log: $tmin_log)" >&2
        cargo +nightly fuzz tmin --sanitizer "$sanitizer" -r "$tmin_runs" "$target" "$artifact" >"$tmin_log" 2>&1 || true
        minimized="$(awk '/^Minimized artifact:/ { getline; getline; print $1; exit }' "$tmin_log")" || true
        # The panic message (the differential targets print a ready-to-paste file test in it).
        message="$(awk '/panicked at/ { on = 1 } on && (/^stack backtrace:/ || /^note: / || /^==[0-9]+==/) { exit }
            on && n++ < 80 { print "    " $0 }' "$log")" || true
        findings+=("- \`$target\`: \`$artifact\`, minimised: \`${minimized:-not minimised, see $tmin_log}\`; log \`$log\`")
        if [[ -n "$message" ]]; then findings+=("$message"); fi
    done
    rows+=("| \`$target\` | $ran | $executions | $execs_per_s | $new_entries | ${#new_artifacts[@]} |")
done

{
    echo "# Fuzzing campaign, $started"
    echo
    avx512="$(grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo ', AVX-512')" || true
    echo "- Machine: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) CPUs$avx512"
    echo "- Commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src fuzz/fuzz_targets || echo ' (with local changes)')"
    echo "- $seconds s per target, sanitizer $sanitizer, $(cargo +nightly fuzz --version 2>/dev/null || echo cargo-fuzz)"
    echo
    echo "| target | seconds | executions | execs/s | new corpus entries | findings |"
    echo "|---|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
    echo
    if ((${#findings[@]})); then
        echo "## Findings"
        echo
        printf '%s\n' "${findings[@]}"
    else
        echo "No findings."
    fi
} >"$summary"
cat "$summary"
echo "summary written to $summary" >&2
