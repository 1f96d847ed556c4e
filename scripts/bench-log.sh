#!/usr/bin/env bash
# Interleaved rounds of the partition-log benchmarks (MEASURING.md rule 5):
# every configuration runs once per round, rounds repeat, and the summary
# gives best / median / worst of each metric over the rounds.
#
#   scripts/bench-log.sh [ROUNDS] [BENCH-REGEX] [BENCHTIME]
#   SUSHKA_BENCH_DIR=/path/on/the/disk/to/measure scripts/bench-log.sh 3
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-3}
regex=${2:-'BenchmarkAppend|BenchmarkGroupCommit'}
benchtime=${3:-1s}
out=$(mktemp -d)
go test -c -o "$out/log.test" ./internal/plog
echo "# $(go version); GOMAXPROCS=${GOMAXPROCS:-$(nproc)} GOGC=${GOGC:-100} GOMEMLIMIT=${GOMEMLIMIT:-unset}"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, kernel $(uname -r)"
echo "# storage: $(df -T "${SUSHKA_BENCH_DIR:-${TMPDIR:-/tmp}}" | awk 'NR==2{print $2" on "$1}')"
for r in $(seq 1 "$rounds"); do
	"$out/log.test" -test.run '^$' -test.bench "$regex" -test.benchtime "$benchtime" -test.benchmem >"$out/round$r.txt"
done
cat "$out"/round*.txt | awk '
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 3; i < NF; i++) if ($(i+1) == "MB/s" || $(i+1) == "records/s" || $(i+1) == "appends/s") {
		key = name " " $(i+1); v[key] = v[key] " " $i
	}
}
END {
	for (k in v) {
		n = split(substr(v[k], 2), a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 > a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		printf "%-70s best %12s  median %12s  worst %12s  (n=%d)\n", k, a[1], a[int((n + 1) / 2)], a[n], n
	}
}' | sort
rm -rf "$out"
