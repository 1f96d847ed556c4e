#!/usr/bin/env python3
# table.py RUN_DIR...: one line per run, scenario and system: best (median) [worst] of records/s,
# p50, p99, p99.9 and broker core-s/GB; then the broker's fdatasync / sync-wait / append histograms.
import json, sys, statistics, subprocess, os
def bmw(v, hi=True):
    s = sorted(v, reverse=hi); return f"{s[0]:.4g} ({statistics.median(v):.4g}) [{s[-1]:.4g}]"
for run in sys.argv[1:]:
    for sc in ('sat1', 'sat16', 'half1'):
        p = os.path.join(run, sc + '.json')
        if not os.path.exists(p): continue
        d = json.load(open(p))
        for s in d['scenarios'][0]['systems']:
            raw = s['raw']
            rps = [r['records_per_s'] for r in raw]
            p50 = [r['latency']['p50_ms'] for r in raw]; p99 = [r['latency']['p99_ms'] for r in raw]
            p999 = [r['latency']['p999_ms'] for r in raw]; cpu = [r['broker_cpu_s_per_gb'] for r in raw]
            bounds = ','.join(r['bound'] for r in raw)
            print(f"{os.path.basename(run) or run:4} {sc:6} {s['system']:7} rec/s {bmw(rps)}  p50 {bmw(p50, False)}  p99 {bmw(p99, False)}  p99.9 {bmw(p999, False)}  s/GB {bmw(cpu, False)}  {bounds}")
        for side in ('off', 'on'):
            out = subprocess.run(['python3', os.path.join(os.path.dirname(__file__), 'hq.py'), f'{run}/m-{sc}-0-{side}.txt', f'{run}/m-{sc}-1-{side}.txt', 'sushka_append_(fdatasync|sync_wait|latency)'], capture_output=True, text=True).stdout
            for line in out.splitlines():
                f = line.split()
                print(f"      {sc:6} {side:3} {f[0].replace('sushka_append_',''):<22} {' '.join(f[1:])}")
    ld = open(os.path.join(run, 'load-start.txt')).read().split('\n')
    le = open(os.path.join(run, 'load-end.txt')).read().split('\n') if os.path.exists(os.path.join(run, 'load-end.txt')) else ['', '']
    print(f"     load {ld[0]} {ld[1]} -> {le[0]} {le[1]}")
