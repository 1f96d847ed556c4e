#!/usr/bin/env python3
# hq.py BEFORE AFTER: quantiles (p50, p99) of each histogram's delta between two /metrics dumps.
import sys, re, collections
def parse(path):
    h = collections.defaultdict(dict)
    for line in open(path):
        m = re.match(r'^(\w+)_bucket\{(.*)\} (\S+)$', line)
        if not m: continue
        name, labels, v = m.groups()
        le = re.search(r'le="([^"]+)"', labels).group(1)
        rest = re.sub(r',?le="[^"]+"', '', labels)
        h[(name, rest)][float('inf') if le == '+Inf' else float(le)] = float(v)
    return h
a, b = parse(sys.argv[1]), parse(sys.argv[2])
want = sys.argv[3] if len(sys.argv) > 3 else r'sushka_|go_sched'
for key in sorted(b):
    if not re.search(want, key[0]): continue
    d = {le: b[key][le] - a.get(key, {}).get(le, 0) for le in b[key]}
    les = sorted(d); total = d[les[-1]]
    if total <= 0: continue
    def q(p):
        t = p * total; prev_le, prev_c = 0.0, 0.0
        for le in les:
            if d[le] >= t:
                if le == float('inf'): return prev_le
                frac = (t - prev_c) / max(d[le] - prev_c, 1e-9)
                return prev_le + (le - prev_le) * frac
            prev_le, prev_c = le, d[le]
    print(f"{key[0]:<40} {key[1]:<18} n={int(total):>8}  p50={q(.5)*1e3:8.3f}ms  p99={q(.99)*1e3:8.3f}ms  p99.9={q(.999)*1e3:8.3f}ms")
