#!/usr/bin/env python3
"""Count prefill collisions in the request log of a scenario trace.

Usage:
  KNEECAP_TRACE=1 KNEECAP_TRACE_SEED=3 go test -count=1 -run TestTrace -v ./scenarios/ > trace.txt
  python3 tools/collisions.py trace.txt [more traces...]

For every completed request in the measured window (after the first minute) it
derives when the request reached the engine (end - e2e + queue_wait) and counts
the requests that reached it less than 0.3 s after or before another one: two
prompts prefilled in the same step, or one waiting for the other's step (see
docs/scenarios.md, "Where scenario 1's misses came from"). It prints how many of
those missed a target, and the misses overall.
"""
import re
import sys

WINDOW_START = 60.0  # seconds: the scenarios' warm-up
NEAR = 0.3           # seconds between two engine starts that count as a collision


def seconds(v):
    """Parses a Go time.Duration string (1m2.5s, 700ms, 12µs, 0s)."""
    total = 0.0
    for num, unit in re.findall(r'([\d.]+)(h|ms|µs|us|ns|m|s)', v):
        total += float(num) * {'h': 3600, 'm': 60, 's': 1, 'ms': 1e-3, 'µs': 1e-6, 'us': 1e-6, 'ns': 1e-9}[unit]
    return total


def starts(path):
    out = []
    for line in open(path, encoding='utf-8'):
        if 'msg=request' not in line or 'outcome=rejected' in line or 'outcome=client_cancelled' in line:
            continue
        t = re.search(r'time=\d{4}-\d\d-\d\dT(\d+):(\d+):([\d.]+)Z', line)
        end = int(t.group(1)) * 3600 + int(t.group(2)) * 60 + float(t.group(3))
        field = lambda k: seconds(re.search(r'\b' + k + r'=(\S+)', line).group(1))
        out.append((end - field('e2e') + field('queue_wait'), 'outcome=good' in line))
    return sorted(out)


def main(paths):
    for path in paths:
        win = [s for s in starts(path) if s[0] >= WINDOW_START]
        near = [i for i, (t, _) in enumerate(win)
                if (i > 0 and t - win[i - 1][0] < NEAR) or (i + 1 < len(win) and win[i + 1][0] - t < NEAR)]
        print(f'{path}: {len(win)} engine starts, {len(near)} within {NEAR}s of another '
              f'({sum(1 for i in near if not win[i][1])} of them missed), '
              f'{sum(1 for s in win if not s[1])} missed in all')


if __name__ == '__main__':
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
