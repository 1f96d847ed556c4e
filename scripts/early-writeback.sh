#!/bin/bash
# Early writeback (issue 12 item 4): the same binary with --early-writeback-bytes 0 (off) and
# $ON_BYTES (on), two brokers on the same disk, every bench command driving both (--vs: rounds
# alternate off, on, after a calibration each). Saturation (raw generator, closed loop) at
# 1 KiB x 1 and 1 KiB x 16 partitions, then open loop at 50% of off's median 1 KiB x 1 saturation
# (both at that same rate). Each command's passport probes the disk (4 KiB and flush sizes);
# /metrics of both brokers are dumped around every command; the summary (best (median) [worst]
# of each row, the brokers' fdatasync, sync-wait and append histograms: scripts/hq.py) is
# $OUT/summary.txt (scripts/early-writeback-table.py OUT...).
#   ON_BYTES=1048576 ROUNDS=5 scripts/early-writeback.sh /tmp/wb   (the knob's value, rounds)
#   scripts/early-writeback.sh [OUT_DIR]      (default /work/benchdata/writeback)
# Ports 21400-21403 (loopback only); data under $OUT/data, removed at the end.
set -u
OUT=${1:-/work/benchdata/writeback}; ON_BYTES=${ON_BYTES:-131072}; ROUNDS=${ROUNDS:-3}
BIN=$OUT/sushka; D=$OUT/data
cd "$(dirname "$0")/.." && go build -o "$BIN" ./cmd/sushka || exit 1
rm -rf "$D"; mkdir -p "$D"
{ date -u; cat /proc/loadavg; git log --oneline -1; } > "$OUT/load-start.txt"
"$BIN" bench disk --data-dir "$D" --write-bytes 268435456 > "$OUT/disk-start.txt" 2>&1
"$BIN" serve --data-dir "$D/off" --listen 127.0.0.1:21400 --admin-listen 127.0.0.1:21401 --early-writeback-bytes 0 > "$OUT/off.log" 2>&1 & OFF=$!
"$BIN" serve --data-dir "$D/on" --listen 127.0.0.1:21402 --admin-listen 127.0.0.1:21403 --early-writeback-bytes "$ON_BYTES" > "$OUT/on.log" 2>&1 & ON=$!
trap 'kill $OFF $ON 2>/dev/null; wait' EXIT
sleep 2
C="-b 127.0.0.1:21400 --broker-admin 127.0.0.1:21401 --name wb-off --vs 127.0.0.1:21402 --vs-name wb-on --vs-admin 127.0.0.1:21403 --rounds $ROUNDS --data-dir $D --disk-probe-bytes 268435456 --engine raw --record-size 1024"
metrics() { curl -s 127.0.0.1:21401/metrics > "$OUT/m-$1-off.txt"; curl -s 127.0.0.1:21403/metrics > "$OUT/m-$1-on.txt"; }
run() { # NAME ARGS...
  local n=$1; shift
  metrics "$n-0"
  "$BIN" bench produce $C "$@" --json "$OUT/$n.json" > "$OUT/$n.txt" 2>&1
  metrics "$n-1"
}
run sat1 --max --partitions 1 --duration 5s
run sat16 --max --partitions 16 --connections 4 --duration 5s
SAT=$(grep -E "^#   wb-off " "$OUT/sat1.txt" | sed -E 's/.*records\/s [0-9]+ \(([0-9]+)\).*/\1/' | head -1)
[ -n "$SAT" ] || { echo "no saturation figure in $OUT/sat1.txt" >&2; exit 1; }
RATE=$((SAT / 2)); echo "off's median saturation $SAT, half $RATE" > "$OUT/half-rate.txt"
run half1 --rate "$RATE" --partitions 1 --duration 10s
"$BIN" bench disk --data-dir "$D" --write-bytes 268435456 > "$OUT/disk-end.txt" 2>&1
{ date -u; cat /proc/loadavg; } > "$OUT/load-end.txt"
kill $OFF $ON; wait; trap - EXIT
rm -rf "$D"
python3 scripts/early-writeback-table.py "$OUT" > "$OUT/summary.txt"
echo done > "$OUT/DONE"
