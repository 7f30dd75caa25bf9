#!/usr/bin/python3
"""MPI correctness checks through mpi4py, for any number of ranks >= 2.

Companion of correctness.c, written to be run over hxcomm's libfabric provider (Open MPI
pml cm + mtl ofi) and validated against Open MPI's default transports (ob1: vader/tcp/self).

Run it with Debian's interpreter, /usr/bin/python3, which has python3-mpi4py: a `python3`
earlier on PATH (e.g. pyenv) may lack mpi4py.  Debian's python3 here has no numpy, so buffers
are bytearray / array.array (nothing is pip-installed):

    mpirun -np 4 /usr/bin/python3 tests/mpi/correctness.py [SEED]

Deterministic from a seed: argv[1], else $HXMPI_SEED, else 20240601.  Environment knobs:
    HXMPI_ROUNDS=N         random rounds per API (default 3)
    HXMPI_BIG_MB=N         big message between rank 0 and the last rank (default 64)
    HXMPI_NO_SELF=1        no messages to self in the random traffic
    HXMPI_TIMEOUT=S        watchdog: a rank stuck longer than S s prints FAIL and exits (180)
    HXMPI_THREAD_LEVEL=L   mpi4py.rc.thread_level (single|funneled|serialized|multiple);
                           mpi4py's default is multiple
    HXMPI_SKIP=a,b         leave out groups of checks: zero random sync probe cancel big
                           isolation coll trunc (barrier: accepted, no separate check here)
    HXMPI_INJECT=corrupt|swaptag|reorder|drop|coll   break the program on purpose: the run
                           must FAIL (drop: through the watchdog, after HXMPI_TIMEOUT)

Every failed check prints one line to stdout
    FAIL rank R/N phase P seed S: <what> (peer, tag, size, offset, expected and got)
and ends the job with Abort (non-zero exit).  On success rank 0 prints "OK correctness.py ...".

Matched probes (Mprobe/mprobe, and mpi4py's lowercase recv(), which uses a matched probe) are
never used on synchronous sends (Open MPI 4.1 bug), so the lowercase API never uses ssend.
"""
import array
import faulthandler
import os
import random
import struct
import sys
import threading
import time
import traceback

import mpi4py

if os.environ.get("HXMPI_THREAD_LEVEL"):
    mpi4py.rc.thread_level = os.environ["HXMPI_THREAD_LEVEL"]
from mpi4py import MPI  # noqa: E402

SEED = int(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("HXMPI_SEED") or "20240601", 0)
ROUNDS = int(os.environ.get("HXMPI_ROUNDS") or 3)
BIG = int(os.environ.get("HXMPI_BIG_MB") or 64) << 20
NO_SELF = (os.environ.get("HXMPI_NO_SELF") or "0") != "0"
TIMEOUT = int(os.environ.get("HXMPI_TIMEOUT") or 180)
INJECT = os.environ.get("HXMPI_INJECT") or None
GROUPS = "zero random sync probe cancel big isolation barrier coll trunc".split()
SKIP = [g for g in (os.environ.get("HXMPI_SKIP") or "").replace(",", " ").split() if g]

world = MPI.COMM_WORLD
RANK, SIZE = world.Get_rank(), world.Get_size()
GUARD = 64
GB = 0xA5
TAGS = [0, 1, 2, 7, 32767]
BOUNDARY = [4095, 4096, 4097, 32767, 32768, 32769, 65537]
MAX_RANDOM = 256 * 1024
T_ZERO, T_NEVER, T_CANCEL, T_SYNC, T_GO, T_MP, T_SS, T_SR, T_BIG, T_ISO, T_TRUNC, T_AFTER = (
    30000, 30001, 30002, 30003, 30004, 30005, 30006, 30007, 30008, 5, 30010, 30011)

phase = "init"
stats = {"msgs": 0, "bytes": 0, "objs": 0}


def fail(msg):
    sys.stdout.write(f"FAIL rank {RANK}/{SIZE} phase {phase} seed {SEED}: {msg}\n")
    sys.stdout.flush()
    world.Abort(1)
    os._exit(1)


def set_phase(p):
    global phase
    phase = p


def _watchdog():
    os.write(1, (f"FAIL rank {RANK}/{SIZE} phase {phase} seed {SEED}: watchdog timeout after "
                 f"{TIMEOUT} s (hang?)\n").encode())
    os._exit(3)


# ---------------------------------------------------------------------------- payloads

def pat(n, *key):
    """n deterministic pseudo-random bytes for key"""
    return random.Random(f"{SEED}/" + "/".join(map(str, key))).randbytes(n)


def big_pat(n, *key):
    """cheap big pattern: a 1 MiB random block, each MiB stamped with its index"""
    base = pat(1 << 20, *key)
    chunks = [struct.pack("<Q", i) + base[8:] for i in range((n + (1 << 20) - 1) >> 20)]
    return b"".join(chunks)[:n]


def first_diff(a, b):
    n = min(len(a), len(b))
    step = 4096
    for i in range(0, n, step):
        if a[i:i + step] != b[i:i + step]:
            for j in range(i, min(i + step, n)):
                if a[j] != b[j]:
                    return j
    return n


def expect_bytes(what, got, exp, peer, tag, guard=None):
    """got: the receive buffer (bytearray, at least len(exp) [+GUARD] long)"""
    n = len(exp)
    if got[:n] != exp:
        off = first_diff(got[:n], exp)
        fail(f"{what}: data mismatch peer={peer} tag={tag} size={n} offset={off} "
             f"got=0x{got[off]:02x} expected=0x{exp[off]:02x}")
    if guard:
        g = got[n:n + GUARD]
        if g != bytes([GB]) * len(g):
            off = n + next(i for i, b in enumerate(g) if b != GB)
            fail(f"{what}: receive wrote past the end of the message peer={peer} tag={tag} "
                 f"size={n} offset={off} got=0x{got[off]:02x}")


def expect_status(what, st, src, tag, size):
    c = st.Get_count(MPI.BYTE)
    if ((src != MPI.ANY_SOURCE and st.Get_source() != src) or
            (tag != MPI.ANY_TAG and st.Get_tag() != tag) or c != size):
        fail(f"{what}: status mismatch: expected source={src} tag={tag} count={size}, got "
             f"source={st.Get_source()} tag={st.Get_tag()} count={c}")


def rbuf(n):
    return bytearray([GB]) * (n + GUARD)


def view(b, n):
    return memoryview(b)[:n]


# ---------------------------------------------------------------------------- random traffic

class Msg:
    __slots__ = ("src", "dst", "tag", "idx", "seq", "size", "sync")

    def __init__(self, src, dst, tag, idx, seq, size, sync):
        self.src, self.dst, self.tag, self.idx = src, dst, tag, idx
        self.seq, self.size, self.sync = seq, size, sync

    def __repr__(self):
        return (f"src={self.src} dst={self.dst} tag={self.tag} size={self.size} "
                f"msgidx={self.idx} seq={self.seq}")


def rand_size(r):
    c = r.randrange(100)
    if c < 8:
        return 0
    if c < 40:
        return r.randrange(65)
    if c < 70:
        return r.randrange(65, 4097)
    if c < 90:
        return r.randrange(4097, 65537)
    return r.randrange(65537, MAX_RANDOM + 1)


def make_plan(kind, rnd, n, allow_sync):
    plan = []
    for s in range(n):
        r = random.Random(f"{SEED}/plan/{kind}/{rnd}/{s}")
        sizes = [rand_size(r) for _ in range(8 + r.randrange(12))] + BOUNDARY
        r.shuffle(sizes)
        seqc = {}
        msgs = []
        for i, sz in enumerate(sizes):
            if not NO_SELF and r.randrange(25) == 0:
                dst = s
            else:
                dst = (s + 1 + r.randrange(n - 1)) % n
            tag = r.choice([0, 0, 0, 1, 1, 2, 7, 32767])
            sync = allow_sync and r.randrange(5) == 0
            seq = seqc.get((dst, tag), 0)
            seqc[(dst, tag)] = seq + 1
            msgs.append(Msg(s, dst, tag, i, seq, sz, sync))
        plan.append(msgs)
    return plan


class Rx:
    """what this rank must receive, as (source, tag) streams in non-overtaking order"""

    def __init__(self, comm, cname, kind, rnd, plan):
        self.comm, self.cname, self.kind, self.rnd = comm, cname, kind, rnd
        self.me, self.n = comm.Get_rank(), comm.Get_size()
        self.streams = {}
        self.claimed = {}
        self.unclaimed = 0
        self.cap = 0
        for s in range(self.n):
            for m in plan[s]:
                if m.dst == self.me:
                    self.streams.setdefault((m.src, m.tag), []).append(m)
                    self.unclaimed += 1
                    self.cap = max(self.cap, m.size)
        self.claimed = {k: 0 for k in self.streams}
        self.rr = random.Random(f"{SEED}/rx/{kind}/{rnd}/{self.me}")

    def where(self, how):
        return f"{self.kind} {how} comm={self.cname} round={self.rnd}"

    def claim(self, src, tag, how):
        k = (src, tag)
        lst = self.streams.get(k, [])
        c = self.claimed.get(k, 0)
        if c >= len(lst):
            fail(f"{self.where(how)}: extra message from src={src} tag={tag}: all {len(lst)} "
                 "expected already received (duplicate or misrouted?)")
        self.claimed[k] = c + 1
        self.unclaimed -= 1
        return lst[c]

    def pick(self):
        k = self.rr.randrange(self.unclaimed)
        for key in sorted(self.streams):
            left = len(self.streams[key]) - self.claimed[key]
            if k < left:
                return key
            k -= left
        fail("internal: pick found nothing")

    def spec(self, mode):
        src, tag = self.pick()
        if mode in (1, 3):
            src = MPI.ANY_SOURCE
        if mode in (2, 3):
            tag = MPI.ANY_TAG
        return src, tag

    def mprobe_ok(self, src, tag):
        for (s, t), lst in self.streams.items():
            c = self.claimed[(s, t)]
            if c < len(lst) and src in (MPI.ANY_SOURCE, s) and tag in (MPI.ANY_TAG, t):
                if lst[c].sync:
                    return False
        return True

    def check_spec(self, src, tag, gsrc, gtag, how):
        if (src != MPI.ANY_SOURCE and gsrc != src) or (tag != MPI.ANY_TAG and gtag != tag):
            fail(f"{self.where(how)}: receive for source={src} tag={tag} matched "
                 f"source={gsrc} tag={gtag}")


def mode_name(src, tag):
    a, t = src == MPI.ANY_SOURCE, tag == MPI.ANY_TAG
    return "any/any" if a and t else "any-source" if a else "any-tag" if t else "exact"


HDR = struct.Struct("<HHHHII")


def payload(m, rnd, cid):
    b = bytearray(pat(m.size, "p2p", rnd, cid, m.src, m.dst, m.idx))
    if m.size >= 16:
        HDR.pack_into(b, 0, m.src, m.dst, m.tag, rnd, m.idx, m.seq)
    return b


def verify_buf(x, m, buf, st, how, cid):
    c = st.Get_count(MPI.BYTE)
    hdr = ""
    if c >= 16:
        s, d, t, r, i, q = HDR.unpack_from(buf, 0)
        hdr = f"; its payload header says src={s} dst={d} tag={t} round={r} msgidx={i} seq={q}"
    if st.Get_source() != m.src or st.Get_tag() != m.tag or c != m.size:
        fail(f"{x.where(how)}: expected msg {m}, got status source={st.Get_source()} "
             f"tag={st.Get_tag()} count={c}{hdr}")
    exp = payload(m, x.rnd, cid)
    if m.size >= 16 and buf[:16] != exp[:16]:
        fail(f"{x.where(how)}: wrong message (misplaced or overtaken): expected {m}{hdr}")
    if buf[:m.size] != exp:
        off = first_diff(buf[:m.size], exp)
        fail(f"{x.where(how)}: data mismatch {m} offset={off} got=0x{buf[off]:02x} "
             f"expected=0x{exp[off]:02x}")
    g = buf[m.size:m.size + GUARD]
    if g != bytes([GB]) * GUARD:
        fail(f"{x.where(how)}: receive wrote past the end of the message {m}")
    stats["msgs"] += 1
    stats["bytes"] += m.size


def buffer_round(comm, cid, cname, rnd):
    """uppercase (buffer) API: Isend/Issend, Recv/Irecv/Probe/Iprobe/Mprobe/Improbe"""
    n, me = comm.Get_size(), comm.Get_rank()
    plan = make_plan("buf", rnd, n, True)
    x = Rx(comm, cname, "buffer-api", rnd, plan)
    cap = x.cap

    # pre-post exact receives before sending
    pre = []
    for _ in range(min(x.rr.randrange(5), x.unclaimed)):
        src, tag = x.pick()
        m = x.claim(src, tag, "pre-posted Irecv")
        b = rbuf(cap)
        pre.append((m, b, comm.Irecv(view(b, cap), src, tag)))

    sends = []
    mine = plan[me]
    bufs = [payload(m, rnd, cid) for m in mine]
    order = list(range(len(mine)))
    tags = [m.tag for m in mine]
    if INJECT and rnd == 0 and RANK == 0 and cid == 1:
        if INJECT == "corrupt":
            i = next(i for i, m in enumerate(mine) if m.size >= 100)
            bufs[i][mine[i].size // 2] ^= 1
        elif INJECT == "swaptag":
            i, j = next((i, j) for i in range(len(mine)) for j in range(i + 1, len(mine))
                        if mine[i].dst == mine[j].dst and mine[i].tag != mine[j].tag)
            tags[i], tags[j] = tags[j], tags[i]
        elif INJECT == "drop":  # the last message is never sent: its receiver hangs
            order = order[:-1]
        elif INJECT == "reorder":
            i, j = next((i, j) for i in range(len(mine)) for j in range(i + 1, len(mine))
                        if mine[i].dst == mine[j].dst and mine[i].tag == mine[j].tag)
            order[i], order[j] = j, i
    for i in order:
        m = mine[i]
        f = comm.Issend if m.sync else comm.Isend
        sends.append(f(bufs[i], m.dst, tags[i]))

    st = MPI.Status()
    while x.unclaimed > 0:
        op = x.rr.randrange(8)
        mode = x.rr.randrange(4)
        if op in (3, 4):
            src, tag = x.spec(mode)
            if not x.mprobe_ok(src, tag):
                op = 1
        elif op != 5:
            src, tag = x.spec(mode)
        b = rbuf(cap)
        if op == 0:
            how = f"Recv({mode_name(src, tag)})"
            comm.Recv(view(b, cap), src, tag, st)
            x.check_spec(src, tag, st.Get_source(), st.Get_tag(), how)
            verify_buf(x, x.claim(st.Get_source(), st.Get_tag(), how), b, st, how, cid)
        elif op in (1, 2):
            how = f"{'Probe' if op == 1 else 'Iprobe'}({mode_name(src, tag)})+Recv"
            ps = MPI.Status()
            if op == 1:
                comm.Probe(src, tag, ps)
            else:
                while not comm.Iprobe(src, tag, ps):
                    pass
            x.check_spec(src, tag, ps.Get_source(), ps.Get_tag(), how)
            m = x.claim(ps.Get_source(), ps.Get_tag(), how)
            c = ps.Get_count(MPI.BYTE)
            if c != m.size:
                fail(f"{x.where(how)}: probe reports size {c}, expected {m}")
            comm.Recv(view(b, c), ps.Get_source(), ps.Get_tag(), st)
            verify_buf(x, m, b, st, how, cid)
        elif op in (3, 4):
            how = f"{'Mprobe' if op == 3 else 'Improbe'}({mode_name(src, tag)})+Mrecv"
            ps = MPI.Status()
            if op == 3:
                msg = comm.Mprobe(src, tag, ps)
            else:
                msg = None
                while msg is None:
                    msg = comm.Improbe(src, tag, ps)
            x.check_spec(src, tag, ps.Get_source(), ps.Get_tag(), how)
            m = x.claim(ps.Get_source(), ps.Get_tag(), how)
            if ps.Get_count(MPI.BYTE) != m.size:
                fail(f"{x.where(how)}: matched probe reports size {ps.Get_count(MPI.BYTE)}, "
                     f"expected {m}")
            if op == 3:
                msg.Recv(view(b, cap), st)
            else:
                msg.Irecv(view(b, cap)).Wait(st)
            verify_buf(x, m, b, st, how, cid)
        elif op == 5:
            reqs, slots = [], []
            for _ in range(1 + x.rr.randrange(3)):
                if x.unclaimed == 0:
                    break
                s_, t_ = x.pick()
                m = x.claim(s_, t_, "batch Irecv(exact)")
                bb = rbuf(cap)
                reqs.append(comm.Irecv(view(bb, cap if x.rr.randrange(2) else m.size), s_, t_))
                slots.append((m, bb))
            for _ in range(min(x.rr.randrange(3), x.unclaimed)):
                bb = rbuf(cap)
                reqs.append(comm.Irecv(view(bb, cap), MPI.ANY_SOURCE, MPI.ANY_TAG))
                slots.append((None, bb))
            sts = [MPI.Status() for _ in reqs]
            how_c = x.rr.choice(["Waitall", "Waitany", "Testsome"])
            if how_c == "Waitall":
                MPI.Request.Waitall(reqs, sts)
            elif how_c == "Waitany":
                for _ in reqs:
                    s1 = MPI.Status()
                    i = MPI.Request.Waitany(reqs, s1)
                    sts[i] = s1
            else:
                done = 0
                while done < len(reqs):
                    s1 = [MPI.Status() for _ in reqs]
                    idx = MPI.Request.Testsome(reqs, s1)
                    if idx is None:
                        fail("Testsome returned MPI_UNDEFINED early")
                    for k, i in enumerate(idx):
                        sts[i] = s1[k]
                    done += len(idx)
            for (m, bb), s1 in zip(slots, sts):  # posting order
                how = f"batch Irecv({'exact' if m else 'any/any'})+{how_c}"
                if m is None:
                    m = x.claim(s1.Get_source(), s1.Get_tag(), how)
                verify_buf(x, m, bb, s1, how, cid)
        else:
            how = f"Irecv({mode_name(src, tag)})+Test"
            rq = comm.Irecv(view(b, cap), src, tag)
            while not rq.Test(st):
                pass
            x.check_spec(src, tag, st.Get_source(), st.Get_tag(), how)
            verify_buf(x, x.claim(st.Get_source(), st.Get_tag(), how), b, st, how, cid)

    for m, b, rq in pre:
        rq.Wait(st)
        verify_buf(x, m, b, st, "pre-posted Irecv", cid)
    MPI.Request.Waitall(sends)
    if comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st):
        fail(f"buffer-api comm={cname} round={rnd}: unexpected extra message source="
             f"{st.Get_source()} tag={st.Get_tag()} count={st.Get_count(MPI.BYTE)}")


def obj_of(m, rnd, cid):
    return {"src": m.src, "dst": m.dst, "tag": m.tag, "idx": m.idx, "seq": m.seq, "round": rnd,
            "payload": pat(m.size, "obj", rnd, cid, m.src, m.dst, m.idx),
            "extra": [m.idx, 1.5 * m.seq, None, ("x" * (m.idx % 7), {"k": [m.src, m.dst]})]}


def object_round(comm, cid, cname, rnd):
    """lowercase (pickle) API: isend, recv/irecv/probe/iprobe/mprobe/improbe"""
    n, me = comm.Get_size(), comm.Get_rank()
    plan = make_plan("obj", rnd, n, False)  # no ssend: recv() uses a matched probe
    x = Rx(comm, cname, "object-api", rnd, plan)
    sends = [comm.isend(obj_of(m, rnd, cid), m.dst, m.tag) for m in plan[me]]
    st = MPI.Status()

    def check(m, obj, how):
        exp = obj_of(m, rnd, cid)
        if obj != exp:
            got = {k: v for k, v in obj.items() if k != "payload"} if isinstance(obj, dict) \
                else type(obj)
            fail(f"{x.where(how)}: wrong object: expected {m}, got {got}")
        if st.Get_source() != m.src or st.Get_tag() != m.tag:
            fail(f"{x.where(how)}: status source={st.Get_source()} tag={st.Get_tag()}, "
                 f"expected {m}")
        stats["objs"] += 1

    while x.unclaimed > 0:
        op = x.rr.randrange(5)
        src, tag = x.spec(x.rr.randrange(4))
        if op == 0:
            how = f"recv({mode_name(src, tag)})"
            obj = comm.recv(None, src, tag, st)
        elif op == 1:
            how = f"probe/iprobe({mode_name(src, tag)})+recv"
            ps = MPI.Status()
            if x.rr.randrange(2):
                comm.probe(src, tag, ps)
            else:
                while not comm.iprobe(src, tag, ps):
                    pass
            x.check_spec(src, tag, ps.Get_source(), ps.Get_tag(), how)
            obj = comm.recv(None, ps.Get_source(), ps.Get_tag(), st)
            if (st.Get_source(), st.Get_tag()) != (ps.Get_source(), ps.Get_tag()):
                fail(f"{x.where(how)}: probe said source={ps.Get_source()} tag={ps.Get_tag()}"
                     f", recv got source={st.Get_source()} tag={st.Get_tag()}")
        elif op == 2:
            how = f"mprobe({mode_name(src, tag)})+recv"
            obj = comm.mprobe(src, tag, st).recv()
        elif op == 3:
            how = f"improbe({mode_name(src, tag)})+irecv"
            msg = None
            while msg is None:
                msg = comm.improbe(src, tag, st)
            obj = msg.irecv().wait()
        else:
            how = f"irecv({mode_name(src, tag)})"
            obj = comm.irecv(bytearray(1 << 20), src, tag).wait(st)
        x.check_spec(src, tag, st.Get_source(), st.Get_tag(), how)
        check(x.claim(st.Get_source(), st.Get_tag(), how), obj, how)
    MPI.Request.waitall(sends)
    if comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st):
        fail(f"object-api comm={cname} round={rnd}: unexpected extra message source="
             f"{st.Get_source()} tag={st.Get_tag()} count={st.Get_count(MPI.BYTE)}")


# ---------------------------------------------------------------------------- other p2p

def zero_byte():
    set_phase("zero-byte")
    n, me = SIZE, RANK
    reqs = [world.Isend(b"", d, T_ZERO) for d in range(n) if d != me]
    seen = set()
    st = MPI.Status()
    for _ in range(n - 1):
        world.Recv(bytearray(0), MPI.ANY_SOURCE, T_ZERO, st)
        expect_status("zero-byte Recv(any-source)", st, MPI.ANY_SOURCE, T_ZERO, 0)
        if st.Get_source() in seen or st.Get_source() == me:
            fail(f"zero-byte: duplicate or unexpected message from source={st.Get_source()}")
        seen.add(st.Get_source())
    MPI.Request.Waitall(reqs)


def sync_sends():
    n, me = SIZE, RANK
    nxt, prv = (me + 1) % n, (me - 1) % n
    st = MPI.Status()
    set_phase("issend-semantics")
    for sz in (8, 100000):
        rs = world.Issend(pat(sz, "sync", me, sz), nxt, T_SYNC)
        t = time.time()
        while time.time() - t < 0.05:
            if rs.Test():
                fail(f"Issend of {sz} bytes to peer={nxt} tag={T_SYNC} completed before the "
                     "receiver posted a receive")
            time.sleep(0.001)
        rg = world.Isend(b"go", nxt, T_GO)
        world.Recv(bytearray(2), prv, T_GO)
        b = rbuf(sz)
        world.Recv(view(b, sz), prv, T_SYNC, st)
        expect_status("issend-semantics Recv", st, prv, T_SYNC, sz)
        expect_bytes("issend-semantics", b, pat(sz, "sync", prv, sz), prv, T_SYNC, True)
        rs.Wait()
        rg.Wait()

    set_phase("ssend-pairs")
    partner = me ^ 1
    if partner < n:
        for sz in (0, 1000, 70000):
            for sender in (me & ~1, me | 1):
                if me == sender:
                    world.Ssend(pat(sz, "ss", me, sz), partner, T_SS)
                else:
                    b = rbuf(sz)
                    world.Recv(view(b, sz), partner, T_SS, st)
                    expect_status("Ssend->Recv", st, partner, T_SS, sz)
                    expect_bytes("Ssend->Recv", b, pat(sz, "ss", partner, sz), partner, T_SS, True)

    set_phase("sendrecv")
    for it in range(3):
        mysz = random.Random(f"{SEED}/sr/{me}/{it}").randrange(200000)
        prsz = random.Random(f"{SEED}/sr/{prv}/{it}").randrange(200000)
        b = rbuf(prsz)
        world.Sendrecv(pat(mysz, "sr", me, it), nxt, T_SR, view(b, prsz),
                       MPI.ANY_SOURCE if it == 2 else prv, T_SR, st)
        expect_status("Sendrecv", st, prv, T_SR, prsz)
        expect_bytes("Sendrecv", b, pat(prsz, "sr", prv, it), prv, T_SR, True)
    # lowercase sendrecv of objects
    obj = world.sendrecv({"from": me, "data": pat(5000, "osr", me)}, nxt, T_SR, None, prv, T_SR)
    if obj != {"from": prv, "data": pat(5000, "osr", prv)}:
        fail(f"sendrecv(object) from peer={prv} tag={T_SR}: wrong object")


def probes():
    n, me = SIZE, RANK
    nxt, prv = (me + 1) % n, (me - 1) % n
    st, st2 = MPI.Status(), MPI.Status()
    set_phase("probe-semantics")
    r = world.Isend(pat(3000, "probe", me), nxt, T_MP)
    while not world.Iprobe(MPI.ANY_SOURCE, T_MP, st):
        pass
    expect_status("Iprobe", st, prv, T_MP, 3000)
    world.Probe(prv, MPI.ANY_TAG, st2)
    expect_status("Probe after Iprobe", st2, prv, T_MP, 3000)
    b = rbuf(3000)
    world.Recv(view(b, 3000), prv, T_MP, st)
    expect_bytes("Recv after probes", b, pat(3000, "probe", prv), prv, T_MP, True)
    r.Wait()

    set_phase("mprobe-semantics")
    for it, (sa, sb) in enumerate(((100, 200), (100000, 5000))):
        rq = [world.Isend(pat(sa, "mpa", me, it), nxt, T_MP),
              world.Isend(pat(sb, "mpb", me, it), nxt, T_MP)]
        ra, rb = rbuf(sa), rbuf(sb)
        if it == 0:
            msg = world.Mprobe(prv, T_MP, st)
            expect_status("Mprobe (first of two)", st, prv, T_MP, sa)
            world.Recv(view(rb, sb), prv, T_MP, st2)
            msg.Recv(view(ra, sa), st)
        else:
            msg = None
            while msg is None:
                msg = world.Improbe(MPI.ANY_SOURCE, T_MP, st)
            expect_status("Improbe (first of two)", st, prv, T_MP, sa)
            r2 = world.Irecv(view(rb, sb), MPI.ANY_SOURCE, T_MP)
            r1 = msg.Irecv(view(ra, sa))
            r1.Wait(st)
            r2.Wait(st2)
        expect_status("receive after matched probe (second message)", st2, prv, T_MP, sb)
        expect_bytes("receive after matched probe (second message)", rb, pat(sb, "mpb", prv, it),
                     prv, T_MP, True)
        expect_status("Mrecv of matched first message", st, prv, T_MP, sa)
        expect_bytes("Mrecv of matched first message", ra, pat(sa, "mpa", prv, it), prv, T_MP,
                     True)
        MPI.Request.Waitall(rq)
    # lowercase: mprobe'd object is out of matching too
    rq = [world.isend(("A", me), nxt, T_MP), world.isend(("B", me), nxt, T_MP)]
    msg = world.mprobe(prv, T_MP)
    second = world.recv(None, prv, T_MP)
    first = msg.recv()
    if (first, second) != (("A", prv), ("B", prv)):
        fail(f"lowercase mprobe: got first={first} second={second} from peer={prv}")
    MPI.Request.waitall(rq)


def cancels():
    n, me = SIZE, RANK
    nxt, prv = (me + 1) % n, (me - 1) % n
    st = MPI.Status()
    set_phase("cancel-unmatched")
    for src in (MPI.ANY_SOURCE, prv):
        r = world.Irecv(bytearray(64), src, T_NEVER)
        r.Cancel()
        r.Wait(st)
        if not st.Is_cancelled():
            fail(f"Cancel of a posted receive that cannot match (source={src} tag={T_NEVER}): "
                 "Test_cancelled says not cancelled")
    set_phase("cancel-matched")
    for sz in (100, 100000):
        b = rbuf(sz)
        r = world.Irecv(view(b, sz), prv, T_CANCEL)
        world.Ssend(pat(sz, "cancel", me, sz), nxt, T_CANCEL)
        world.Barrier()  # every Ssend has been matched
        r.Cancel()
        r.Wait(st)
        if st.Is_cancelled():
            fail(f"Cancel of a receive already matched by an Ssend (peer={prv} tag={T_CANCEL} "
                 f"size={sz}): Test_cancelled says cancelled")
        expect_status("receive after failed cancel", st, prv, T_CANCEL, sz)
        expect_bytes("receive after failed cancel", b, pat(sz, "cancel", prv, sz), prv, T_CANCEL,
                     True)


def big_message():
    set_phase("big-message")
    me, last = RANK, SIZE - 1
    if me not in (0, last):
        return
    peer = last if me == 0 else 0
    st = MPI.Status()
    for it in range(3):  # 0: both directions at once; 1: 0 -> last; 2: last -> 0
        s = big_pat(BIG, "big", me, it)
        b = rbuf(BIG)
        got = True
        if it == 0:
            r = world.Irecv(view(b, BIG), peer, T_BIG)
            world.Isend(s, peer, T_BIG).Wait()
            r.Wait(st)
        elif (it == 1) == (me == 0):
            world.Send(s, peer, T_BIG)
            got = False
        else:
            world.Recv(view(b, BIG), peer, T_BIG, st)
        if got:
            expect_status("big message", st, peer, T_BIG, BIG)
            expect_bytes("big message", b, big_pat(BIG, "big", peer, it), peer, T_BIG, True)
            stats["msgs"] += 1
            stats["bytes"] += BIG


# ---------------------------------------------------------------------------- communicators

def isolation(comms):
    set_phase("comm-isolation")
    reqs = []
    for i in reversed(range(len(comms))):
        c, cid, name = comms[i]
        r, n = c.Get_rank(), c.Get_size()
        reqs.append(c.Isend(pat(100 + 100 * i, "iso", cid, r), (r + 1) % n, T_ISO))
        reqs.append(c.isend(("iso", cid, r), (r + 1) % n, T_ISO + 1))
    st = MPI.Status()
    for i, (c, cid, name) in enumerate(comms):
        r, n = c.Get_rank(), c.Get_size()
        prv = (r - 1) % n
        sz = 100 + 100 * i
        b = rbuf(1000)
        c.Recv(view(b, 1000), MPI.ANY_SOURCE, T_ISO, st)
        expect_status(f"comm-isolation on {name}", st, prv, T_ISO, sz)
        expect_bytes(f"comm-isolation on {name}", b, pat(sz, "iso", cid, prv), prv, T_ISO, True)
        obj = c.recv(None, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
        if obj != ("iso", cid, prv) or st.Get_tag() != T_ISO + 1:
            fail(f"comm-isolation (objects) on {name}: got {obj} tag={st.Get_tag()}, expected "
                 f"{('iso', cid, prv)} from peer={prv}")
    MPI.Request.Waitall(reqs)


# ---------------------------------------------------------------------------- collectives

def ivals(cid, q, what, count):
    """count small ints (int16 range), so sums over many ranks fit in a C int"""
    return array.array("i", array.array("h", pat(2 * count, "ival", cid, q, what)))


def coll_suite(c, cid, name):
    r, n = c.Get_rank(), c.Get_size()
    set_phase(f"coll-barrier {name}")
    for _ in range(3):
        c.Barrier()
        c.barrier()

    set_phase(f"coll-allreduce {name}")
    for what, cnt in enumerate((1, 1000, 100000)):
        allv = [ivals(cid, q, what, cnt) for q in range(n)]
        inp = array.array("i", allv[r])
        if INJECT == "coll" and RANK == 0 and cid == 1 and cnt == 1000:
            inp[7] += 1
        out = array.array("i", bytes(4 * cnt))
        c.Allreduce(inp, out, MPI.SUM)
        ref = [sum(t) for t in zip(*allv)]
        if list(out) != ref:
            i = next(i for i in range(cnt) if out[i] != ref[i])
            fail(f"Allreduce(MPI_INT, SUM) comm={name} count={cnt} index={i}: got {out[i]} "
                 f"expected {ref[i]}")
        c.Allreduce(inp, out, MPI.MAX)
        ref = [max(t) for t in zip(*allv)]
        if list(out) != ref:
            i = next(i for i in range(cnt) if out[i] != ref[i])
            fail(f"Allreduce(MPI_INT, MAX) comm={name} count={cnt} index={i}: got {out[i]} "
                 f"expected {ref[i]}")
        dv = [array.array("d", (v * 0.25 for v in a)) for a in allv]
        dout = array.array("d", bytes(8 * cnt))
        c.Allreduce(dv[r], dout, MPI.SUM)
        ref = [sum(t) for t in zip(*dv)]  # quarter-integers: exact in any order
        if list(dout) != ref:
            i = next(i for i in range(cnt) if dout[i] != ref[i])
            fail(f"Allreduce(MPI_DOUBLE, SUM) comm={name} count={cnt} index={i}: got {dout[i]} "
                 f"expected {ref[i]}")
    # lowercase
    got = c.allreduce(r + 1, op=MPI.SUM)
    if got != n * (n + 1) // 2:
        fail(f"allreduce(object, SUM) comm={name}: got {got} expected {n * (n + 1) // 2}")
    got = c.allreduce((r * 7919) % 101, op=MPI.MAX)
    if got != max((q * 7919) % 101 for q in range(n)):
        fail(f"allreduce(object, MAX) comm={name}: got {got}")

    set_phase(f"coll-bcast {name}")
    for root in range(n):
        b = rbuf(13)
        if r == root:
            b[:13] = pat(13, "bc", cid, root)
        c.Bcast(view(b, 13), root)
        expect_bytes(f"Bcast(13 bytes, root={root}) comm={name}", b, pat(13, "bc", cid, root),
                     root, -1, True)
        obj = c.bcast({"root": root, "d": pat(3000, "obc", cid, root)} if r == root else None,
                      root)
        if obj != {"root": root, "d": pat(3000, "obc", cid, root)}:
            fail(f"bcast(object, root={root}) comm={name}: wrong object")
    for root in sorted({0, n - 1}):
        sz = 8 << 20
        exp = big_pat(sz, "bcbig", cid, root)
        b = rbuf(sz)
        if r == root:
            b[:sz] = exp
        c.Bcast(view(b, sz), root)
        expect_bytes(f"Bcast(8 MiB, root={root}) comm={name}", b, exp, root, -1, True)

    set_phase(f"coll-alltoall {name}")
    for B in (37, 4096):
        allv = [ivals(cid, q, 10 + B, B * n) for q in range(n)]
        out = array.array("i", bytes(4 * B * n))
        c.Alltoall(allv[r], out)
        for s in range(n):
            if out[s * B:(s + 1) * B] != allv[s][r * B:(r + 1) * B]:
                fail(f"Alltoall({B} ints per peer) comm={name}: block from peer={s} wrong")
    got = c.alltoall([(r, d, "x" * d) for d in range(n)])
    if got != [(s, r, "x" * r) for s in range(n)]:
        fail(f"alltoall(objects) comm={name}: got {got}")

    set_phase(f"coll-allgather {name}")
    for G in (333, 40000):
        allv = [ivals(cid, q, 20 + G, G) for q in range(n)]
        out = array.array("i", bytes(4 * G * n))
        c.Allgather(allv[r], out)
        for q in range(n):
            if out[q * G:(q + 1) * G] != allv[q]:
                fail(f"Allgather({G} ints) comm={name}: block from peer={q} wrong")
    got = c.allgather({"r": r, "s": "y" * r})
    if got != [{"r": q, "s": "y" * q} for q in range(n)]:
        fail(f"allgather(objects) comm={name}: wrong result")
    c.Barrier()


# ---------------------------------------------------------------------------- truncation

def truncation():
    set_phase("truncation")
    n, me = SIZE, RANK
    nxt, prv = (me + 1) % n, (me - 1) % n
    tc = world.Dup()
    tc.Set_errhandler(MPI.ERRORS_RETURN)  # mpi4py turns error returns into MPI.Exception
    # below every Open MPI eager limit: larger truncated messages crash Open MPI 4.1.4's ob1
    for it, (ms, rs) in enumerate(((100, 50), (2000, 1000))):
        sr = tc.Isend(pat(ms, "trunc", me, it), nxt, T_TRUNC)
        b = rbuf(rs)
        how = "Recv" if it == 0 else "Irecv+Wait"
        cls = None
        try:
            if it == 0:
                tc.Recv(view(b, rs), prv, T_TRUNC)
            else:
                tc.Irecv(view(b, rs), prv, T_TRUNC).Wait()
        except MPI.Exception as e:
            cls = e.Get_error_class()
        if cls != MPI.ERR_TRUNCATE:
            fail(f"truncation: {how} of a {ms}-byte message into {rs} bytes from peer={prv} "
                 f"tag={T_TRUNC}: error class {cls}, expected MPI_ERR_TRUNCATE "
                 f"({MPI.ERR_TRUNCATE})")
        if b[rs:] != bytes([GB]) * GUARD:
            fail(f"truncation: {how} of a {ms}-byte message into {rs} bytes wrote past the "
                 f"buffer (peer={prv} tag={T_TRUNC})")
        try:
            sr.Wait()
        except MPI.Exception as e:
            if e.Get_error_class() != MPI.ERR_TRUNCATE:
                fail(f"truncation: sender's Wait to peer={nxt} failed with class "
                     f"{e.Get_error_class()}")
    # lowercase: an object too big for the irecv buffer (its pickle stays below the eager
    # limit too: a 5000-byte one corrupted the heap under ob1/vader)
    sr = tc.isend(pat(500, "otrunc", me), nxt, T_TRUNC)
    cls = None
    guard = bytearray([GB]) * (100 + GUARD)
    try:
        tc.irecv(view(guard, 100), prv, T_TRUNC).wait()
    except MPI.Exception as e:
        cls = e.Get_error_class()
    if cls != MPI.ERR_TRUNCATE:
        fail(f"truncation: irecv(100-byte buffer) of a pickled 500-byte object from "
             f"peer={prv}: error class {cls}, expected MPI_ERR_TRUNCATE")
    if guard[100:] != bytes([GB]) * GUARD:
        fail(f"truncation: irecv(100-byte buffer) of a pickled 500-byte object wrote past the "
             f"buffer (peer={prv} tag={T_TRUNC})")
    try:
        sr.wait()
    except MPI.Exception:
        pass
    set_phase("after-truncation")
    for c in (tc, world):
        b = rbuf(70000)
        st = MPI.Status()
        c.Sendrecv(pat(70000, "after", me), nxt, T_AFTER, view(b, 70000), prv, T_AFTER, st)
        expect_status("exchange after truncation", st, prv, T_AFTER, 70000)
        expect_bytes("exchange after truncation", b, pat(70000, "after", prv), prv, T_AFTER, True)
    tc.Barrier()
    tc.Free()


# ---------------------------------------------------------------------------- main

def main():
    t0 = time.time()
    if SIZE < 2:
        fail(f"needs at least 2 ranks, got {SIZE}")
    if INJECT not in (None, "corrupt", "swaptag", "reorder", "drop", "coll"):
        fail(f"HXMPI_INJECT={INJECT}: unknown (corrupt|swaptag|reorder|drop|coll)")
    bad = [g for g in SKIP if g not in GROUPS]
    if bad:
        fail(f"HXMPI_SKIP: unknown group(s) {bad} (groups: {' '.join(GROUPS)})")
    set_phase("comm-create")
    dup = world.Dup()
    split = world.Split(RANK % 2, -RANK)
    splitdup = split.Dup()
    if MPI.Comm.Compare(dup, world) != MPI.CONGRUENT:
        fail("Compare(dup, world) is not CONGRUENT")
    same = [q for q in range(SIZE) if q % 2 == RANK % 2]
    if split.Get_size() != len(same) or split.Get_rank() != sum(q > RANK for q in same):
        fail(f"Split(color=rank%2, key=-rank): rank {split.Get_rank()} of {split.Get_size()}")
    world.Barrier()

    if "zero" not in SKIP:
        zero_byte()
    # the object API runs on its own communicators, so that each round can check that no
    # extra message is left on its communicator (nobody can send on it again before we do)
    ow, od = world.Dup(), dup.Dup()
    for rnd in range(ROUNDS if "random" not in SKIP else 0):
        c, cid, name = (world, 1, "world") if rnd % 2 == 0 else (dup, 2, "dup(world)")
        set_phase(f"random-p2p buffer-api round {rnd}")
        buffer_round(c, cid, name, rnd)
        c, cid, name = (ow, 5, "dup(world)#2") if rnd % 2 == 0 else (od, 6, "dup(dup(world))")
        set_phase(f"random-p2p object-api round {rnd}")
        object_round(c, cid, name, rnd)
    if split.Get_size() >= 2 and "random" not in SKIP:
        set_phase("random-p2p split")
        buffer_round(split, 3, "split(world) (split numbering)", ROUNDS)
        object_round(splitdup, 4, "dup(split(world)) (split numbering)", ROUNDS)
    world.Barrier()
    ow.Free()
    od.Free()

    for g, f in (("sync", sync_sends), ("probe", probes), ("cancel", cancels),
                 ("big", big_message)):
        if g not in SKIP:
            f()
    world.Barrier()
    comms = [(world, 1, "world"), (dup, 2, "dup(world)"), (split, 3, "split(world)"),
             (splitdup, 4, "dup(split)")]
    if "isolation" not in SKIP:
        isolation(comms)
    world.Barrier()
    for c, cid, name in comms[:3] if "coll" not in SKIP else []:
        coll_suite(c, cid, name)
    if "trunc" not in SKIP:
        truncation()

    set_phase("finish")
    tot = world.gather((stats["msgs"], stats["bytes"], stats["objs"]), root=0)
    splitdup.Free()
    split.Free()
    dup.Free()
    if RANK == 0:
        m = sum(t[0] for t in tot)
        b = sum(t[1] for t in tot)
        o = sum(t[2] for t in tot)
        print(f"OK correctness.py ranks={SIZE} seed={SEED} rounds={ROUNDS} "
              f"p2p_msgs_checked={m} p2p_bytes_checked={b} objects_checked={o} "
              f"big={BIG >> 20}MiB mpi4py={mpi4py.__version__} "
              f"thread_level={mpi4py.rc.thread_level} skipped={','.join(SKIP) or 'none'} "
              f"time={time.time() - t0:.2f}s", flush=True)


if __name__ == "__main__":
    faulthandler.dump_traceback_later(TIMEOUT + 15, exit=True)
    wd = threading.Timer(TIMEOUT, _watchdog)
    wd.daemon = True
    wd.start()
    try:
        main()
    except SystemExit:
        raise
    except BaseException:
        fail("exception: " + traceback.format_exc().replace("\n", " | "))
    wd.cancel()
