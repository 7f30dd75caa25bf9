#!/usr/bin/env python3
"""Where an 8-host all-to-all's time goes, link by link (issue 9; BENCHMARKS.md "hyper-crossbar").

  a2a_links.py sample PREFIX HOSTS SECONDS OUT.json   # as root, beside the job: every 20 ms the
                                                      # rx/tx byte counters of every NIC of testbed
                                                      # PREFIX's hosts (/proc/PID/net/dev of a
                                                      # sleep in each namespace)
  a2a_links.py rounds OUT.json                        # per round (traffic above 30 MB/s): length,
                                                      # bytes sent by all NICs, per-NIC min/median/max

e.g. python3 bench/a2a_links.py sample hk 8 25 /tmp/s.json &
     hxcomm run --net --name hk -n 8 -- hxcomm bench alltoall --size 16M --rounds 5 --throughput --detail
"""
import json, subprocess, sys, time


def sample(pre, n, secs, out):
    procs = {str(h): subprocess.Popen(["ip", "netns", "exec", f"{pre}{h}", "sleep", str(secs + 5)])
             for h in range(n)}
    time.sleep(0.3)

    def read(pid):
        d = {}
        for l in open(f"/proc/{pid}/net/dev").read().splitlines()[2:]:
            name, rest = l.split(":", 1)
            f, name = rest.split(), name.strip()
            if name not in ("lo", "mgmt"):
                d[name] = (int(f[0]), int(f[8]))  # rx, tx bytes
        return d

    t0, rows = time.time(), []
    while time.time() - t0 < secs:
        rows.append((time.time(), {h: read(p.pid) for h, p in procs.items()}))
        time.sleep(0.02)
    json.dump(rows, open(out, "w"))
    for p in procs.values():
        p.kill()


def rounds(path):
    rows = json.load(open(path))
    tot = lambda d: sum(v[1] for h in d for v in d[h].values())
    segs, cur = [], None
    for i in range(1, len(rows)):
        r = (tot(rows[i][1]) - tot(rows[i - 1][1])) / (rows[i][0] - rows[i - 1][0]) / 1e6
        if r > 30:
            cur = [i - 1, i] if cur is None else [cur[0], i]
        elif cur is not None and rows[i][0] - rows[cur[1]][0] > 0.3:
            segs.append(cur)
            cur = None
    if cur:
        segs.append(cur)
    for a, b in segs:
        da, db = rows[a][1], rows[b][1]
        v = sorted((db[h][k][1] - da[h][k][1]) / 1e6 for h in da for k in da[h])
        dur = rows[b][0] - rows[a][0]
        print(f"round at {rows[a][0] - rows[0][0]:.2f} s: {dur:.2f} s, {sum(v):.0f} MB sent by "
              f"{len(v)} NICs, per NIC min {v[0]:.1f} median {v[len(v) // 2]:.1f} max {v[-1]:.1f} MB "
              f"(mean {sum(v) / len(v):.1f})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["sample"]:
        sample(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    elif sys.argv[1:2] == ["rounds"]:
        rounds(sys.argv[2])
    else:
        sys.exit(__doc__)
