"""Per turn of bench/mpi_osu.c's bandwidth window, from pcaps of the receiving host's rails
(bench/probes/window_turns.sh): how long the sender's RTS took after Open MPI's 4-byte
acknowledgement, and the receiver's CTS after the RTS. Usage: window_turns.py PCAP..."""
import statistics
import struct
import sys


def packets(path):
    """(time, last octet of the source address, TCP payload bytes) of each IPv4 TCP packet."""
    data = open(path, "rb").read()
    link = struct.unpack("<I", data[20:24])[0]
    off, out = 24, []
    while off + 16 <= len(data):
        sec, usec, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        p = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if link == 1:
            if struct.unpack(">H", p[12:14])[0] != 0x800:
                continue
            p = p[14:]
        ihl = (p[0] & 15) * 4
        total = struct.unpack(">H", p[2:4])[0]
        doff = (p[ihl + 12] >> 4) * 4
        out.append((sec + usec * 1e-6, p[15], total - ihl - doff))
    return out


# Host 0 (address .1 on every rail) sends; host 1 (.2) receives and acknowledges.
ev = sorted((t, src, n) for f in sys.argv[1:] for t, src, n in packets(f) if n > 0)
ACK = 52  # hxcomm's frame of Open MPI's 4-byte acknowledgement
rts_delays, cts_delays = [], []
for k, (t0, src, n) in enumerate(ev):
    if src != 2 or n != ACK:
        continue
    after = ev[k + 1:k + 400]
    rts = [t for t, s, m in after if s == 1 and m < 1000]
    data = [t for t, s, m in after if s == 1 and m >= 1000]
    if not rts or not data:
        continue
    cts = [t for t, s, m in after if s == 2 and m < 1000 and rts[0] < t < data[0]]
    rts_delays.append((rts[0] - t0) * 1e3)
    if cts:
        cts_delays.append((cts[-1] - rts[0]) * 1e3)
print(f"{len(rts_delays)} turns")
for name, v in (("ack -> RTS", rts_delays), ("RTS -> last CTS", cts_delays)):
    if v:
        slow = sum(1 for x in v if x > 1.0)
        print(f"{name:16} ms: median {statistics.median(v):.2f}, max {max(v):.2f}, "
              f"over 1 ms in {slow} of {len(v)}")
