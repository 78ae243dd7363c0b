#!/usr/bin/env python3
"""bench/seed_table.py - the arithmetic and the table of bench/seed_table.sh.

  epochs LOG                      the rank-0 agent's log: one JSON list of its event=epoch lines
                                  [{epoch, steps, acc, epoch_s, eval_delay_s}] (acc null where
                                  not evaluated; eval_delay_s 0 unless the evaluation waited)
  counters BEFORE AFTER           two `cat` dumps of a tun device's tx_bytes and rx_bytes: prints
                                  the bytes that crossed it (tx + rx) between them
  table RESULTS.jsonl [--bars]    one table of the rows bench/seed_table.sh wrote, with time to
                                  the single-agent accuracy computed here (see below); --bars:
                                  then issue 21's bars for the fine-tuning rows (BARS), met or not;
                                  rounds of several seeds: then each row's curve averaged over
                                  the seeds, timed to the mean 1-agent curve (mean_curves)
  split LOG...                    where each rank's step time went, from its agent's log
                                  (r<ROW>-<host>.log): one JSON list, see split() below
  fresh_head SRC DST SEED         copies safetensors SRC to DST with fc.weight and fc.bias drawn
                                  afresh, U(+-1/sqrt(fan_in)) as torch.nn.Linear does, from SEED:
                                  a pretrained backbone for a new task of as many classes

Time to accuracy: the target is the 1-agent row's final test accuracy minus 0.5 points (the
issue's "within 0.5 points"); a row's time is the sum of its epochs' training seconds
(epoch_s, evaluation excluded, the same rule for every row) up to and including the first
epoch whose test accuracy reaches the target, plus that epoch's eval_delay_s: overlapped
DiLoCo evaluates an epoch once the update of its last round is in, a few steps after its
end, and the model that reached the target existed only then.  A row that never reaches it prints "not
reached"; a row cut short after a timed window (fp32 and DDP over a tunnel) prints "-" and its
s/epoch is extrapolated from the window's steps per second (the table says so).  The ratio
column is 1-agent time to accuracy / the row's (>= 1.3 is the issue's bar for 20 Mbit/s auto,
>= 1.0 for 5 Mbit/s).  The capped pair (rows with a "pair" key: "equal" and "half", issue 25)
prints, per round, the two times to the target and half / equal (<= 1.00: the bar met), with
the shares each ended with; without a 1-agent row the target is the pair's lower final accuracy
minus 0.5.  Rows repeated over rounds (bench/seed_table.sh ROUNDS) print medians,
each round's figure in brackets, and the ratio of each round against the 1-agent run of the
same round (the machine's load drifts; a round's runs are back to back); a round that did not
reach the target counts as a ratio of 0 in the median ("n/r").  Where the rounds ran with
different seeds (the fine-tuning table: round r with seed SEED + r - 1), each round's target is
its own 1-agent run's final accuracy minus 0.5, so each ratio compares runs of one seed.
Standard library only.
"""
import json
import random
import re
import struct
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
                    'epoch_s': float(d['epoch_s']),
                    'eval_delay_s': float(d.get('eval_delay_s', 0))})
    return out


def split(paths):
    """Per rank, its event=step-split lines summed over the run (one a rank per epoch: seconds
    summed over the epoch's steps) and its event=diloco-waits line, as ms a step:

      compute    forward, loss and backward, the loader's wait excluded
      loader     waiting for the loader's next batch (data_s)
      allreduce  waiting for the gradient all-reduce (collective_s; 0 for DiLoCo's local steps)
      after      the optimizer's step and what runs after it (optimizer_s): DiLoCo's outer sync,
                 blocking, or the wait for it at the lag step, overlapped, and hash checks
      slowest    of allreduce + after, the part spent waiting for the slowest rank, estimated as
                 this rank's allreduce + after minus the least of any rank of the row (the
                 slowest rank waits least; what it waits is the link's): an estimate
      taken      of compute, what the rank's collective took from its trainer: the loop
                 thread's CPU for it (TLS, summing) inside the host's cap (cpu_taken_s, agents
                 that log it; codec = auto prices it: agent/jobs/autocodec.h)
      switches   codec = auto's switches announced by this rank (the coordinator): at which
                 step, to what (event=codec-switch-announce)
      diloco     (DiLoCo only) the H and lag this rank ran (event=diloco: after the cut to 8
                 rounds in the run, so possibly below the codec column's; each in turn where
                 auto re-sized H mid-run), and what its syncs blocked the trainer: syncs,
                 seconds, ms a sync (event=diloco-waits: one a gradsync, summed)
    The evaluation at each epoch's end on rank 0 is in no column: the other ranks wait for it
    in their next collective or sync, so it shows there, as waiting for the slowest.
    """
    out = []
    for path in paths:
        r = {'log': path, 'steps': 0, 'compute_s': 0.0, 'data_s': 0.0, 'collective_s': 0.0,
             'optimizer_s': 0.0}
        for line in open(path, errors='replace'):
            if 'event=step-split ' in line:
                d = kv(line)
                r['steps'] += int(d['steps'])
                for k in ('compute_s', 'data_s', 'collective_s', 'optimizer_s'):
                    r[k] += float(d[k])
                if 'cpu_taken_s' in d:
                    r['taken_s'] = r.get('taken_s', 0.0) + float(d['cpu_taken_s'])
            elif 'event=codec-switch-announce ' in line:
                d = kv(line)
                r.setdefault('switches', []).append(f'{d.get("codec")} at step {d.get("step")}')
            elif 'event=diloco ' in line:
                d = kv(line)  # DiLoCo as this rank runs it: H after the cap, the lag
                h = f'H={d.get("local_steps")} lag={d.get("lag")}'
                r['diloco_h'] = r['diloco_h'] + ' -> ' + h if 'diloco_h' in r else h
            elif 'event=diloco-waits ' in line:
                d = kv(line)
                w = r.setdefault('diloco', {'syncs': 0, 'wait_s': 0.0})
                w['overlap'] = d.get('overlap') == '1'
                w['syncs'] += int(d['syncs'])
                w['wait_s'] += float(d['wait_ms']) / 1e3
                w['mean_ms'] = w['wait_s'] * 1e3 / w['syncs'] if w['syncs'] else 0.0
        if r['steps'] > 0:
            out.append(r)
    if not out:
        return out
    least = min(r['collective_s'] + r['optimizer_s'] for r in out)
    for r in out:
        n = r['steps']
        r['ms'] = {'compute': (r['compute_s'] - r['data_s']) / n * 1e3,
                   'loader': r['data_s'] / n * 1e3,
                   'allreduce': r['collective_s'] / n * 1e3,
                   'after': r['optimizer_s'] / n * 1e3,
                   'slowest': (r['collective_s'] + r['optimizer_s'] - least) / n * 1e3}
        if 'taken_s' in r:
            r['ms']['taken'] = r['taken_s'] / n * 1e3
    return out


def split_lines(row):
    """The lines under the table for one row's split (see split())."""
    out = []
    for r in row.get('split') or []:
        m = r['ms']
        host = re.sub(r'^r\d+-|\.log$', '', r['log'].rsplit('/', 1)[-1])
        tot = sum(m[k] for k in ('compute', 'loader', 'allreduce', 'after'))
        line = (f'    {host}: {r["steps"]} steps, {tot:.0f} ms a step = compute '
                f'{m["compute"]:.0f} + loader {m["loader"]:.0f} + all-reduce {m["allreduce"]:.0f} '
                f'+ optimizer and after {m["after"]:.0f}')
        if len(row['split']) > 1:
            line += f' (of these two, waiting for the slowest rank ~{m["slowest"]:.0f})'
        if 'taken' in m:
            line += f'; of compute, taken by the collective\'s CPU ~{m["taken"]:.0f}'
        if r.get('switches'):
            line += '; codec switched to ' + ', '.join(r['switches'])
        dl = r.get('diloco')
        if dl and dl['syncs'] > 0:
            line += (f'; DiLoCo {r.get("diloco_h", "")} '
                     f'{"overlapped" if dl["overlap"] else "blocking"}: {dl["syncs"]} '
                     f'syncs blocked it {dl["wait_s"]:.1f} s ({dl["mean_ms"]:.0f} ms a sync)')
        out.append(line)
    return out


def counters(before, after):
    a = [int(x) for x in open(before).read().split()]
    b = [int(x) for x in open(after).read().split()]
    return sum(y - x for x, y in zip(a, b))


def fmt(v, spec, none='-'):
    return none if v is None else format(v, spec)


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


# issue 21's bars for the fine-tuning table (WORKLOAD=finetune), by row name
BARS = {
    '2 agents, LAN': ('ratio', 1.7),
    '2 agents, tunnel 20 Mbit/s, auto': ('ratio', 1.5),
    '3 agents (2 LAN + 1 tunnel 20 Mbit/s), auto': ('ratio', 2.2),
    '2 agents, tunnel 20 Mbit/s, auto, freeze = backbone': ('bytes', 1.0),
}


def table(path, bars=False):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    for r in rows:
        r.setdefault('round', 1)
    base = {r['round']: r for r in rows if r['row'] == '1 agent'}
    # the target: the 1-agent accuracy (median over rounds; one seed, so the rounds agree
    # but for the order of float sums across load) minus 0.5
    acc1 = median(r.get('acc') for r in base.values())
    target = acc1 - 0.5 if acc1 is not None else None
    # rounds of other seeds (the fine-tuning table): each round's rows are timed to its own
    # 1-agent run's accuracy, so every ratio pairs runs of one seed
    seeds = {r['round']: r.get('seed') for r in base.values()}
    per_seed = len(set(seeds.values())) > 1
    targets = {rnd: b['acc'] - 0.5 for rnd, b in base.items()} if per_seed else {}
    paired = [r for r in rows if r.get('pair')]
    if target is None and paired:  # ONLY ran the capped pair: its own target
        target = min(r['acc'] for r in paired) - 0.5
        print('no 1-agent row: the target is the capped pair\'s lower final accuracy - 0.5')

    def tta(r):
        if r.get('epochs') is None or target is None:
            return None, None
        tgt = targets.get(r['round'], target)
        t = 0.0
        for e in r['epochs']:
            t += e['epoch_s']
            if e['acc'] is not None and e['acc'] >= tgt:
                return t + e.get('eval_delay_s', 0), e['epoch']
        return None, 'not reached'

    if per_seed:
        print('target accuracy per round, its 1-agent run\'s - 0.5: ' +
              ', '.join(f'round {rnd} (seed {seeds[rnd]}) {targets[rnd]:.2f}%' for rnd in sorted(targets)))
    else:
        print(f'target accuracy: {fmt(target, ".2f")}% ' + (f'(1 agent\'s {acc1:.2f}% - 0.5)' if acc1 is not None
                                                           else '(no 1-agent row)'))
    hdr = ['row', 's/epoch', 'time to target (s)', 'vs 1 agent', 'test acc %', 'tunnel MB/epoch',
           'codec']
    lines, names, got = [], [], {}
    for r in rows:
        if r['row'] not in names:
            names.append(r['row'])
    rounds = max(r['round'] for r in rows) if rows else 1
    for name in names:
        rs = [r for r in rows if r['row'] == name]
        ts, ratios, eps = [], [], []
        for r in rs:
            t, ep = tta(r)
            ts.append(t)
            eps.append(ep)
            b = base.get(r['round'])
            t1 = tta(b)[0] if b else None
            # a round that never reached the target counts as the slowest (0), not as absent
            ratios.append(t1 / t if t and t1 else 0.0 if t1 and ep == 'not reached' else None)
        tm = median(ts)
        if tm is not None:
            tts = f'{tm:.1f}' + (f' (ep {eps[0]})' if len(rs) == 1 else '')
        else:
            tts = 'not reached' if 'not reached' in eps else '-'
        if len(rs) > 1 and tm is not None:
            tts += ' [' + ', '.join(fmt(t, '.1f', 'n/r') for t in ts) + ']'
        rm = median(ratios)
        got[name] = (rm, median(r.get('tunnel_bytes_epoch') for r in rs))
        ratio = fmt(rm, '.2f') + 'x' if rm is not None else '-'
        if len(rs) > 1 and rm is not None:
            ratio += ' [' + ', '.join('n/r' if x == 0.0 else fmt(x, '.2f', '-') for x in ratios) + ']'
        spe = fmt(median(r.get('s_epoch') for r in rs), '.1f') + ('*' if rs[0].get('partial') else '')
        mb = median(r.get('tunnel_bytes_epoch') for r in rs)
        codecs = sorted(set(r.get('codec', '-') for r in rs))
        lines.append([name, spe, tts, ratio, fmt(median(r.get('acc') for r in rs), '.2f'),
                      fmt(mb / 1e6 if mb is not None else None, '.2f'), ', '.join(codecs)])
    w = [max(len(str(x[i])) for x in lines + [hdr]) for i in range(len(hdr))]
    print(' | '.join(h.ljust(w[i]) for i, h in enumerate(hdr)))
    print('-+-'.join('-' * x for x in w))
    for x in lines:
        print(' | '.join(str(v).ljust(w[i]) for i, v in enumerate(x)))
    if rounds > 1:
        print(f'{rounds} rounds: medians; [per round]; "vs 1 agent" pairs each round with the '
              '1-agent run of the same round')
    if any(r.get('partial') for r in rows):
        print('* extrapolated from a timed window of steps (the row is not trained to the end)')
    if per_seed:
        mean_curves(rows, names)
    if paired:
        print()
        print('the capped pair (issue 25, "Done when" 4: the tunnel host at half the others\' cap '
              'reaches the target no later than with equal caps), per round:')
        for rnd in sorted(set(r['round'] for r in paired)):
            by = {r['pair']: r for r in paired if r['round'] == rnd}
            te, th = (tta(by[k])[0] if k in by else None for k in ('equal', 'half'))
            ratio = fmt(th / te if te and th else None, '.2f')
            verdict = '-' if ratio == '-' else ('met' if th <= te else 'missed')
            if 'half' in by and th is None and te is not None:
                verdict = 'missed: the half-capped row did not reach the target'
            if 'equal' in by and te is None and th is not None:
                verdict = 'met: only the half-capped row reached the target'
            say = {k: ('not run' if k not in by else fmt(t, '.1f', 'not reached') + ' s')
                   for k, t in (('equal', te), ('half', th))}
            print(f'  round {rnd}: equal caps {say["equal"]}, tunnel host at half {say["half"]}: '
                  f'half / equal {ratio} ({verdict})')
            for k in ('equal', 'half'):
                if k in by:
                    sp = by[k].get('spares') or {}
                    print(f'    {k}: shares at the end {by[k].get("shares") or "-"}'
                          + ''.join(f'; {n} a spare: {why}' for n, why in sp.items()))
    for name, (kind, bar) in BARS.items():
        if not bars or name not in got:
            continue
        if kind == 'ratio':
            v = got[name][0]
            print(f'bar: {name}: {fmt(v, ".2f")}{"x" if v is not None else ""} of one agent\'s speed to its accuracy, bar >= '
                  f'{bar}x: ' + ('-' if v is None else 'met' if v >= bar else 'MISSED'))
        else:
            v = got[name][1]
            print(f'bar: {name}: {fmt(v / 1e6 if v is not None else None, ".2f")} MB an epoch over '
                  f'the tunnel, bar < {bar} MB: ' +
                  ('-' if v is None else 'met' if v / 1e6 < bar else 'MISSED'))
    if any(r.get('split') for r in rows):
        print('where the step time went (ms a step, each rank over its whole run, from its '
              'event=step-split and event=diloco-waits; bench/seed_table.py split):')
        for r in rows:
            if r.get('split'):
                print(f'  {r["row"]} (round {r["round"]}):')
                for line in split_lines(r):
                    print(line)


def mean_curves(rows, names):
    """Rounds of different seeds: each row's test accuracy by epoch averaged over the seeds that
    ran it (one accuracy of one seed moves several points between epochs; the mean of n seeds
    about 1/sqrt(n) as much), and the time to the mean 1-agent curve's final accuracy - 0.5 on
    those curves, each epoch's seconds the seeds' mean.  Printed under the per-seed table."""
    def curve(rs):
        n = min(len(r['epochs']) for r in rs)
        accs = []
        for i in range(n):
            a = [r['epochs'][i]['acc'] for r in rs]
            accs.append(sum(a) / len(a) if None not in a else None)
        secs = [sum(r['epochs'][i]['epoch_s'] for r in rs) / len(rs) for i in range(n)]
        delays = [sum(r['epochs'][i].get('eval_delay_s', 0) for r in rs) / len(rs) for i in range(n)]
        return accs, secs, delays

    def reach(accs, secs, delays, tgt):
        t = 0.0
        for i, (a, s, d) in enumerate(zip(accs, secs, delays)):
            t += s
            if a is not None and a >= tgt:
                return t + d, i + 1
        return None, None

    full = [r for r in rows if r.get('epochs') and not r.get('partial')]
    one = [r for r in full if r['row'] == '1 agent']
    if not one:
        return
    a1, s1, d1 = curve(one)
    if a1[-1] is None:
        return
    tgt = a1[-1] - 0.5
    t1, _ = reach(a1, s1, d1, tgt)
    seeds = sorted(set(r.get('seed') for r in one))
    print()
    print(f'over the mean of the seeds\' curves (seeds {", ".join(str(x) for x in seeds)}): the '
          f'target is the mean 1-agent curve\'s final {a1[-1]:.2f}% - 0.5 = {tgt:.2f}%')
    for name in names:
        rs = [r for r in full if r['row'] == name]
        if not rs:
            continue
        accs, secs, delays = curve(rs)
        t, ep = reach(accs, secs, delays, tgt)
        ratio = f'{t1 / t:.2f}x' if t and t1 else '-'
        print(f'  {name} ({len(rs)} seed{"s" if len(rs) > 1 else ""}): ' +
              ', '.join('-' if a is None else f'{a:.2f}' for a in accs) +
              f'; {sum(secs) / len(secs):.1f} s an epoch; target ' +
              (f'at epoch {ep}, {t:.1f} s, {ratio} of one agent\'s speed' if t else 'not reached'))


def fresh_head(src, dst, seed):
    raw = open(src, 'rb').read()
    hl = struct.unpack('<Q', raw[:8])[0]
    head = json.loads(raw[8:8 + hl])
    data = bytearray(raw[8 + hl:])
    fan_in = head['fc.weight']['shape'][1]
    bound = 1.0 / fan_in ** 0.5
    rng = random.Random(seed)
    for name in ('fc.weight', 'fc.bias'):
        e = head[name]
        if e['dtype'] != 'F32':
            sys.exit(f'fresh_head: {name} is {e["dtype"]}, not F32')
        a, b = e['data_offsets']
        n = (b - a) // 4
        data[a:b] = struct.pack(f'<{n}f', *(rng.uniform(-bound, bound) for _ in range(n)))
    open(dst, 'wb').write(raw[:8 + hl] + bytes(data))


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ''
    if cmd == 'epochs' and len(sys.argv) == 3:
        print(json.dumps(epochs(sys.argv[2])))
    elif cmd == 'counters' and len(sys.argv) == 4:
        print(counters(sys.argv[2], sys.argv[3]))
    elif cmd == 'split' and len(sys.argv) >= 3:
        print(json.dumps(split(sys.argv[2:])))
    elif cmd == 'table' and len(sys.argv) == 3:
        table(sys.argv[2])
    elif cmd == 'table' and len(sys.argv) == 4 and sys.argv[3] == '--bars':
        table(sys.argv[2], bars=True)
    elif cmd == 'fresh_head' and len(sys.argv) == 5:
        fresh_head(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main()
