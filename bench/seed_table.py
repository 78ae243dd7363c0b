#!/usr/bin/env python3
"""bench/seed_table.py - the arithmetic and the table of bench/seed_table.sh.

  epochs LOG                      the rank-0 agent's log: one JSON list of its event=epoch lines
                                  [{epoch, steps, acc, epoch_s}] (acc null where not evaluated)
  counters BEFORE AFTER           two `cat` dumps of a tun device's tx_bytes and rx_bytes: prints
                                  the bytes that crossed it (tx + rx) between them
  table RESULTS.jsonl             one table of the rows bench/seed_table.sh wrote, with time to
                                  the single-agent accuracy computed here (see below)

Time to accuracy: the target is the 1-agent row's final test accuracy minus 0.5 points (the
issue's "within 0.5 points"); a row's time is the sum of its epochs' training seconds
(epoch_s, evaluation excluded, the same rule for every row) up to and including the first
epoch whose test accuracy reaches the target.  A row that never reaches it prints "not
reached"; a row cut short after a timed window (fp32 and DDP over a tunnel) prints "-" and its
s/epoch is extrapolated from the window's steps per second (the table says so).  The ratio
column is 1-agent time to accuracy / the row's (>= 1.3 is the issue's bar for 20 Mbit/s auto,
>= 1.0 for 5 Mbit/s).
Standard library only.
"""
import json
import re
import sys


def kv(line):
    return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))


def epochs(path):
    out = []
    for line in open(path, errors='replace'):
        if 'event=epoch ' not in line:
            continue
        d = kv(line)
        out.append({'epoch': int(d['epoch']), 'steps': int(d['steps']),
                    'acc': float(d['test_accuracy']) if 'test_accuracy' in d else None,
                    'epoch_s': float(d['epoch_s'])})
    return out


def counters(before, after):
    a = [int(x) for x in open(before).read().split()]
    b = [int(x) for x in open(after).read().split()]
    return sum(y - x for x, y in zip(a, b))


def fmt(v, spec, none='-'):
    return none if v is None else format(v, spec)


def table(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    base = next((r for r in rows if r['row'] == '1 agent'), None)
    target = base['acc'] - 0.5 if base and base.get('acc') is not None else None

    def tta(r):
        if r.get('epochs') is None or target is None:
            return None, '-'
        t = 0.0
        for e in r['epochs']:
            t += e['epoch_s']
            if e['acc'] is not None and e['acc'] >= target:
                return t, f'{t:.1f} (ep {e["epoch"]})'
        return None, 'not reached'

    t1, _ = tta(base) if base else (None, None)
    print(f'target accuracy: {fmt(target, ".2f")}% (1 agent\'s {fmt(base and base.get("acc"), ".2f")}%'
          ' - 0.5)')
    hdr = ['row', 's/epoch', 'time to target (s)', 'vs 1 agent', 'test acc %', 'tunnel MB/epoch',
           'codec']
    lines = []
    for r in rows:
        t, ts = tta(r)
        ratio = f'{t1 / t:.2f}x' if t and t1 else '-'
        spe = fmt(r.get('s_epoch'), '.1f') + ('*' if r.get('partial') else '')
        mb = r.get('tunnel_bytes_epoch')
        lines.append([r['row'], spe, ts, ratio, fmt(r.get('acc'), '.2f'),
                      fmt(mb / 1e6 if mb is not None else None, '.2f'), r.get('codec', '-')])
    w = [max(len(str(x[i])) for x in lines + [hdr]) for i in range(len(hdr))]
    print(' | '.join(h.ljust(w[i]) for i, h in enumerate(hdr)))
    print('-+-'.join('-' * x for x in w))
    for x in lines:
        print(' | '.join(str(v).ljust(w[i]) for i, v in enumerate(x)))
    if any(r.get('partial') for r in rows):
        print('* extrapolated from a timed window of steps (the row is not trained to the end)')


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ''
    if cmd == 'epochs' and len(sys.argv) == 3:
        print(json.dumps(epochs(sys.argv[2])))
    elif cmd == 'counters' and len(sys.argv) == 4:
        print(counters(sys.argv[2], sys.argv[3]))
    elif cmd == 'table' and len(sys.argv) == 3:
        table(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main()
