//! The frame header: 48 bytes in front of every eager message, rendezvous control message and data
//! chunk. It carries its own length so a newer peer can append fields an older one skips.
//!
//! ```text
//!  0  magic "HX"      2 version   3 header_len   4 kind   5 flags
//!  6  src_ep u16      8 dst_ep u16              10 reserved u16
//! 12  payload_len u32
//! 16  seq u64         per sender->receiver pair; orders matching across rails
//! 24  tag u64
//! 32  value u64       Eager/Rts: message length; Data: offset of the chunk; Ack: frames received
//! 40  ack u64         frames the sender of this frame has received on this rail (piggybacked ack)
//! 48  data u64        immediate data of an Eager/Rts (libfabric's remote CQ data), if FLAG_DATA
//! ```
//!
//! A header of 48 bytes (an older sender) is accepted and has no data; longer ones are skipped
//! past whatever follows the fields this version knows.

use crate::{u16_at, u32_at, u64_at, WireError};

pub const MAGIC: [u8; 2] = *b"HX";
/// 2: remote memory access and atomics (`FLAG_RMA`, `FLAG_READ`, `FLAG_REFUSED`, the `Atomic`
/// and `AtomicAnswer` kinds), which a version-1 peer would misread as messages.
pub const VERSION: u8 = 2;
/// Length of the headers this version emits.
pub const HEADER_LEN: usize = 56;
/// Shortest header accepted.
pub const MIN_HEADER_LEN: usize = 48;

/// Flag: the receiver should acknowledge promptly (e.g. the last chunk of a message).
pub const FLAG_ACK_REQ: u8 = 1;
/// Flag on a CTS: the receiver offers its buffer for a direct copy (same host): `value` is the
/// buffer's address in the receiver, `tag` its capacity.
pub const FLAG_DIRECT: u8 = 2;
/// Flag on an Eager or Rts: `data` carries the sender's immediate data.
pub const FLAG_DATA: u8 = 4;
/// Flag on an Eager frame instead of [`FLAG_DATA`]: the immediate data sits in the `value`
/// field (an eager frame's length is its `payload_len` anyway), so the 48-byte header carries
/// it and a small message with data fits one cache line over shared memory. Parsed into the
/// same [`FrameHeader`] as the long form (`FLAG_DATA` set, `data` filled, `value` the length).
pub const FLAG_DATA_IN_VALUE: u8 = 8;
/// Flag on an Eager frame: the sender waits to hear that the receiver has taken the message
/// (into a receive, or held until one comes): a [`FrameKind::Delivered`] back.
pub const FLAG_DELIVERY: u8 = 16;
/// Flag on an Rts: not a message but remote memory access (libfabric's FI_RMA): `tag` is the
/// target's region key, `data` the address in the target, `value` the length. Alone, a write:
/// its data follows the target's Cts as a rendezvous message's would. With [`FLAG_READ`], a
/// read: the target answers with an Rts of its own carrying [`FLAG_READ`] alone, or, for a small
/// read, with an Eager frame carrying [`FLAG_READ`] alone and the bytes. On an Eager frame alone,
/// a small write with its bytes.
pub const FLAG_RMA: u8 = 32;
/// Flag on an Rts: with [`FLAG_RMA`], a read request; alone, the answer to the read request
/// whose sequence number is in `tag` (its data follows the reader's Cts).
pub const FLAG_READ: u8 = 64;
/// Flag on a read's answer (an Rts with [`FLAG_READ`]) or on a write's Cts: the target refused
/// the access; `data` says why (a reason code, see the protocol's `RmaRefusal`), no data follows.
pub const FLAG_REFUSED: u8 = 128;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A whole small message; payload follows.
    Eager = 1,
    /// Request to send a large message (rendezvous); no payload.
    Rts = 2,
    /// Clear to send: the receiver matched an RTS and its buffer is ready; no payload.
    Cts = 3,
    /// A piece of a rendezvous message at offset `value`; payload follows.
    Data = 4,
    /// Keeps an idle rail observable; no payload.
    Heartbeat = 5,
    /// Orderly close of a rail.
    Bye = 6,
    /// Explicit acknowledgement: `value` frames received on this rail; no payload.
    Ack = 7,
    /// Eager credit: the receiver has freed `value` bytes of eager data (cumulative); no payload.
    Credit = 8,
    /// A rendezvous message was copied directly into the receiver's buffer (`value` bytes).
    Fin = 9,
    /// The receiver has taken the eager message `seq` (sent with [`FLAG_DELIVERY`]); no payload.
    Delivered = 10,
    /// An atomic operation on the receiver's memory (libfabric's FI_ATOMIC). `seq`: its id
    /// among the sender's atomics to this peer; `src_ep`/`dst_ep`: operation and type codes;
    /// `tag`: region key; `data`: address; `value`: the lowest id of the sender's atomics still
    /// unanswered (the receiver forgets its answers below it). Payload: operand and compare
    /// value, little-endian u64s ([`ATOMIC_PAYLOAD`] bytes).
    Atomic = 11,
    /// The answer to atomic `seq`: `value` is the element's old value; with [`FLAG_REFUSED`]
    /// the target refused and `data` says why. No payload.
    AtomicAnswer = 12,
}

/// Payload bytes of an [`FrameKind::Atomic`] frame.
pub const ATOMIC_PAYLOAD: usize = 16;

impl FrameKind {
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            1 => FrameKind::Eager,
            2 => FrameKind::Rts,
            3 => FrameKind::Cts,
            4 => FrameKind::Data,
            5 => FrameKind::Heartbeat,
            6 => FrameKind::Bye,
            7 => FrameKind::Ack,
            8 => FrameKind::Credit,
            9 => FrameKind::Fin,
            10 => FrameKind::Delivered,
            11 => FrameKind::Atomic,
            12 => FrameKind::AtomicAnswer,
            found => return Err(WireError::UnknownKind { found }),
        })
    }

    /// Frames that the receiver counts and acknowledges over a lossy link, and the sender logs
    /// and resends after a rail failure: the one list both sides go by (a kind counted on one
    /// side only leaves the other's log growing unacknowledged).
    pub fn reliable(self) -> bool {
        matches!(
            self,
            FrameKind::Eager
                | FrameKind::Rts
                | FrameKind::Cts
                | FrameKind::Data
                | FrameKind::Credit
                | FrameKind::Fin
                | FrameKind::Delivered
                | FrameKind::Atomic
                | FrameKind::AtomicAnswer
        )
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: FrameKind,
    pub flags: u8,
    pub src_ep: u16,
    pub dst_ep: u16,
    pub payload_len: u32,
    pub seq: u64,
    pub tag: u64,
    pub value: u64,
    pub ack: u64,
    pub data: u64,
}

impl FrameHeader {
    pub fn new(kind: FrameKind) -> Self {
        FrameHeader {
            kind,
            flags: 0,
            src_ep: 0,
            dst_ep: 0,
            payload_len: 0,
            seq: 0,
            tag: 0,
            value: 0,
            ack: 0,
            data: 0,
        }
    }

    /// Parses a header at the start of `buf`. Returns the header and the number of bytes it
    /// occupies (at least [`HEADER_LEN`]; more if the peer appended extensions).
    pub fn parse(buf: &[u8]) -> Result<(FrameHeader, usize), WireError> {
        if buf.len() < 4 {
            return Err(WireError::Truncated {
                need: MIN_HEADER_LEN,
                have: buf.len(),
            });
        }
        if buf[0..2] != MAGIC {
            return Err(WireError::BadMagic {
                found: [buf[0], buf[1]],
            });
        }
        if buf[2] != VERSION {
            return Err(WireError::UnsupportedVersion { found: buf[2] });
        }
        let header_len = buf[3] as usize;
        if header_len < MIN_HEADER_LEN || !header_len.is_multiple_of(8) {
            return Err(WireError::BadHeaderLen { found: buf[3] });
        }
        if buf.len() < header_len {
            return Err(WireError::Truncated {
                need: header_len,
                have: buf.len(),
            });
        }
        let kind = FrameKind::from_u8(buf[4])?;
        let mut h = FrameHeader {
            kind,
            flags: buf[5],
            src_ep: u16_at(buf, 6),
            dst_ep: u16_at(buf, 8),
            payload_len: u32_at(buf, 12),
            seq: u64_at(buf, 16),
            tag: u64_at(buf, 24),
            value: u64_at(buf, 32),
            ack: u64_at(buf, 40),
            data: if header_len >= 56 { u64_at(buf, 48) } else { 0 },
        };
        if h.flags & FLAG_DATA_IN_VALUE != 0 {
            if h.kind != FrameKind::Eager || h.flags & FLAG_DATA != 0 {
                return Err(WireError::Inconsistent {
                    kind,
                    what: "data-in-value flag",
                    value: h.flags as u64,
                });
            }
            h.data = h.value;
            h.value = h.payload_len as u64;
            h.flags = h.flags & !FLAG_DATA_IN_VALUE | FLAG_DATA;
        }
        h.check()?;
        Ok((h, header_len))
    }

    fn check(&self) -> Result<(), WireError> {
        let bad = |what, value| {
            Err(WireError::Inconsistent {
                kind: self.kind,
                what,
                value,
            })
        };
        let rma = self.flags & (FLAG_RMA | FLAG_READ);
        // On an Eager frame: a read's answer, or a write with its bytes; nothing that would
        // make either a message (immediate data, a word back, a direct copy).
        let eager_rma = self.kind == FrameKind::Eager && (rma == FLAG_READ || rma == FLAG_RMA);
        if rma != 0 && self.kind != FrameKind::Rts && !eager_rma {
            return bad("remote memory access flags", self.flags as u64);
        }
        if eager_rma && self.flags & !(FLAG_RMA | FLAG_READ | FLAG_ACK_REQ) != 0 {
            return bad("flags beside remote memory access", self.flags as u64);
        }
        if self.flags & FLAG_REFUSED != 0 {
            let answer = self.kind == FrameKind::Rts && rma == FLAG_READ && self.value == 0;
            let cts = self.kind == FrameKind::Cts && self.flags & FLAG_DIRECT == 0;
            if !answer && !cts && self.kind != FrameKind::AtomicAnswer {
                return bad("refusal flag", self.flags as u64);
            }
        }
        match self.kind {
            FrameKind::Eager if self.value != self.payload_len as u64 => {
                bad("message length != payload_len", self.value)
            }
            FrameKind::Rts
            | FrameKind::Cts
            | FrameKind::Heartbeat
            | FrameKind::Bye
            | FrameKind::Ack
            | FrameKind::Credit
            | FrameKind::Fin
            | FrameKind::Delivered
            | FrameKind::AtomicAnswer
                if self.payload_len != 0 =>
            {
                bad("payload_len", self.payload_len as u64)
            }
            FrameKind::Data if self.payload_len == 0 => bad("payload_len", 0),
            FrameKind::Atomic if self.payload_len as usize != ATOMIC_PAYLOAD => {
                bad("payload_len", self.payload_len as u64)
            }
            FrameKind::Data if self.value.checked_add(self.payload_len as u64).is_none() => {
                bad("offset", self.value)
            }
            _ => Ok(()),
        }
    }

    /// Writes the header into `out`.
    pub fn emit(&self, out: &mut [u8; HEADER_LEN]) {
        out[0..2].copy_from_slice(&MAGIC);
        out[2] = VERSION;
        out[3] = HEADER_LEN as u8;
        out[4] = self.kind as u8;
        out[5] = self.flags;
        out[6..8].copy_from_slice(&self.src_ep.to_le_bytes());
        out[8..10].copy_from_slice(&self.dst_ep.to_le_bytes());
        out[10..12].copy_from_slice(&[0, 0]);
        out[12..16].copy_from_slice(&self.payload_len.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.tag.to_le_bytes());
        out[32..40].copy_from_slice(&self.value.to_le_bytes());
        out[40..48].copy_from_slice(&self.ack.to_le_bytes());
        out[48..56].copy_from_slice(&self.data.to_le_bytes());
    }

    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.emit(&mut b);
        b
    }
}

/// The fields of an eager frame's header that a sender chooses (see [`eager_header_short`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EagerHeader {
    pub flags: u8,
    pub src_ep: u16,
    pub dst_ep: u16,
    /// Payload and message length.
    pub len: u32,
    pub seq: u64,
    pub tag: u64,
    pub ack: u64,
    pub data: u64,
}

/// An eager frame's header in the 48-byte form (the array's first 48 bytes; byte 3 says 48),
/// written straight into the array (every small send makes one): immediate data, if `e.flags`
/// has [`FLAG_DATA`], travels in the value field ([`FLAG_DATA_IN_VALUE`]). Parses to the same
/// header as [`FrameHeader::to_bytes`] of the same fields.
#[inline(always)]
pub fn eager_header_short(e: EagerHeader) -> [u8; HEADER_LEN] {
    let (flags, value) = if e.flags & FLAG_DATA != 0 {
        (e.flags & !FLAG_DATA | FLAG_DATA_IN_VALUE, e.data)
    } else {
        (e.flags, e.len as u64)
    };
    let mut b = [0u8; HEADER_LEN];
    b[0..2].copy_from_slice(&MAGIC);
    b[2] = VERSION;
    b[3] = MIN_HEADER_LEN as u8;
    b[4] = FrameKind::Eager as u8;
    b[5] = flags;
    b[6..8].copy_from_slice(&e.src_ep.to_le_bytes());
    b[8..10].copy_from_slice(&e.dst_ep.to_le_bytes());
    b[12..16].copy_from_slice(&e.len.to_le_bytes());
    b[16..24].copy_from_slice(&e.seq.to_le_bytes());
    b[24..32].copy_from_slice(&e.tag.to_le_bytes());
    b[32..40].copy_from_slice(&value.to_le_bytes());
    b[40..48].copy_from_slice(&e.ack.to_le_bytes());
    b
}

/// The fields an express receive needs of an eager frame, read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EagerView {
    /// Header length (where the payload starts).
    pub hlen: usize,
    pub flags: u8,
    pub src_ep: u16,
    pub dst_ep: u16,
    /// Payload length (equal to the message length in a valid eager frame).
    pub len: usize,
    pub seq: u64,
    pub tag: u64,
    pub data: u64,
    /// The piggybacked acknowledgement (frames the sender has received on this rail).
    pub ack: u64,
}

/// An eager frame's fields at the start of `buf`, if [`FrameHeader::parse`] would accept its
/// header as an Eager one; `None` for anything else (another kind, too few bytes, a bad header),
/// for which the caller takes the full parse, which says what is wrong. A fraction of the full
/// parse's instructions: this is on every small message's path over shared memory.
#[inline]
pub fn eager_view(buf: &[u8]) -> Option<EagerView> {
    let b: &[u8; MIN_HEADER_LEN] = buf.get(..MIN_HEADER_LEN)?.try_into().ok()?;
    let hlen = b[3] as usize;
    if b[0..3] != [MAGIC[0], MAGIC[1], VERSION]
        || b[4] != FrameKind::Eager as u8
        || hlen < MIN_HEADER_LEN
        || !hlen.is_multiple_of(8)
        || buf.len() < hlen
    {
        return None;
    }
    let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let len = u32::from_le_bytes(b[12..16].try_into().unwrap());
    let flags = b[5];
    if flags & (FLAG_RMA | FLAG_READ | FLAG_REFUSED) != 0 {
        // A read's answer (which goes to no receive) or flags never on an eager frame: the
        // full parse takes or refuses them.
        return None;
    }
    if flags & FLAG_DATA_IN_VALUE != 0 {
        if flags & FLAG_DATA != 0 {
            return None;
        }
        return Some(EagerView {
            hlen,
            flags: flags & !FLAG_DATA_IN_VALUE | FLAG_DATA,
            src_ep: u16::from_le_bytes([b[6], b[7]]),
            dst_ep: u16::from_le_bytes([b[8], b[9]]),
            len: len as usize,
            seq: word(16),
            tag: word(24),
            data: word(32),
            ack: word(40),
        });
    }
    if word(32) != len as u64 {
        return None;
    }
    Some(EagerView {
        hlen,
        flags,
        src_ep: u16::from_le_bytes([b[6], b[7]]),
        dst_ep: u16::from_le_bytes([b[8], b[9]]),
        len: len as usize,
        seq: word(16),
        tag: word(24),
        // buf.len() >= hlen >= HEADER_LEN: in bounds.
        data: if hlen >= HEADER_LEN {
            u64::from_le_bytes(buf[48..56].try_into().unwrap())
        } else {
            0
        },
        ack: word(40),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EAGER_BYTES: [u8; 56] = [
        b'H', b'X', 2, 56, 1, 4, // magic, version, header_len, kind, flags (FLAG_DATA)
        3, 0, 7, 0, 0, 0, // src_ep 3, dst_ep 7, reserved
        5, 0, 0, 0, // payload_len 5
        0x2a, 0, 0, 0, 0, 0, 0, 0, // seq 42
        0xef, 0xbe, 0xad, 0xde, 0, 0, 0, 0, // tag 0xdeadbeef
        5, 0, 0, 0, 0, 0, 0, 0, // value 5
        9, 1, 0, 0, 0, 0, 0, 0, // ack 265
        0x78, 0x56, 0x34, 0x12, 0, 0, 0, 0, // data 0x12345678
    ];

    fn eager() -> FrameHeader {
        FrameHeader {
            kind: FrameKind::Eager,
            flags: FLAG_DATA,
            src_ep: 3,
            dst_ep: 7,
            payload_len: 5,
            seq: 42,
            tag: 0xdead_beef,
            value: 5,
            ack: 265,
            data: 0x1234_5678,
        }
    }

    #[test]
    fn emit_fixed_bytes() {
        assert_eq!(eager().to_bytes(), EAGER_BYTES);
    }

    #[test]
    fn parse_fixed_bytes() {
        assert_eq!(FrameHeader::parse(&EAGER_BYTES), Ok((eager(), 56)));
        // A 48-byte header of an older sender: no data.
        let mut old = [0u8; 48];
        old.copy_from_slice(&EAGER_BYTES[..48]);
        old[3] = 48;
        old[5] = 0;
        let mut want = eager();
        want.flags = 0;
        want.data = 0;
        assert_eq!(FrameHeader::parse(&old), Ok((want, 48)));
    }

    /// `h`'s fields as a sender gives them to [`eager_header_short`].
    fn fields_of(h: &FrameHeader) -> EagerHeader {
        EagerHeader {
            flags: h.flags,
            src_ep: h.src_ep,
            dst_ep: h.dst_ep,
            len: h.payload_len,
            seq: h.seq,
            tag: h.tag,
            ack: h.ack,
            data: h.data,
        }
    }

    #[test]
    fn the_short_eager_header_parses_as_the_long_one() {
        let mut long = eager();
        let mut no_data = eager();
        (no_data.flags, no_data.data) = (0, 0);
        let mut big = FrameHeader::new(FrameKind::Eager);
        (big.payload_len, big.value, big.seq, big.tag) = (u32::MAX, u32::MAX as u64, u64::MAX, 1);
        for h in [long, no_data, big] {
            let short = eager_header_short(fields_of(&h));
            assert_eq!(FrameHeader::parse(&short[..48]), Ok((h, 48)));
            view_agrees(&short[..48]);
            assert_eq!(eager_view(&short[..48]).unwrap().data, h.data);
        }
        long.flags = FLAG_DATA;
        let fields = fields_of(&long);
        // Data in the value field is for eager frames only, and not beside the data field.
        let mut b = eager_header_short(fields);
        b[5] = FLAG_DATA_IN_VALUE | FLAG_DATA;
        assert!(matches!(
            FrameHeader::parse(&b[..48]),
            Err(WireError::Inconsistent { .. })
        ));
        view_agrees(&b[..48]);
        let mut rts = FrameHeader::new(FrameKind::Rts);
        rts.flags = FLAG_DATA_IN_VALUE;
        assert!(matches!(
            FrameHeader::parse(&rts.to_bytes()),
            Err(WireError::Inconsistent { .. })
        ));
    }

    /// The express view agrees with the full parse on every eager message header and declines
    /// the rest (eager reads' answers and writes included).
    fn view_agrees(b: &[u8]) {
        let full = FrameHeader::parse(b).ok();
        let want = full
            .filter(|(h, _)| h.kind == FrameKind::Eager && h.flags & (FLAG_READ | FLAG_RMA) == 0)
            .map(|(h, hlen)| EagerView {
                hlen,
                flags: h.flags,
                src_ep: h.src_ep,
                dst_ep: h.dst_ep,
                len: h.payload_len as usize,
                seq: h.seq,
                tag: h.tag,
                data: h.data,
                ack: h.ack,
            });
        assert_eq!(eager_view(b), want, "{b:?}");
    }

    #[test]
    fn eager_view_matches_parse() {
        view_agrees(&EAGER_BYTES);
        let mut old = [0u8; 48];
        old.copy_from_slice(&EAGER_BYTES[..48]);
        old[3] = 48;
        view_agrees(&old);
        let mut ext = [0u8; 72];
        ext[..56].copy_from_slice(&EAGER_BYTES);
        ext[3] = 64;
        view_agrees(&ext);
        view_agrees(&ext[..63]);
        for n in 0..56 {
            view_agrees(&EAGER_BYTES[..n]);
        }
        // Every single-byte change of the header: kinds, lengths, magic, version.
        for at in 0..56 {
            for v in [0u8, 1, 2, 4, 7, 9, 47, 48, 49, 56, 64, 255] {
                let mut b = EAGER_BYTES;
                b[at] = v;
                view_agrees(&b);
            }
        }
        view_agrees(&FrameHeader::new(FrameKind::Cts).to_bytes());
    }

    #[test]
    fn data_frame_fixed_bytes() {
        let mut h = FrameHeader::new(FrameKind::Data);
        h.payload_len = 65536;
        h.seq = 1;
        h.value = 1 << 20;
        let b = h.to_bytes();
        assert_eq!(&b[12..16], &[0, 0, 1, 0]);
        assert_eq!(&b[32..40], &[0, 0, 0x10, 0, 0, 0, 0, 0]);
        assert_eq!(FrameHeader::parse(&b).unwrap().0, h);
    }

    #[test]
    fn truncated_is_not_fatal() {
        for n in 0..56 {
            assert!(
                matches!(
                    FrameHeader::parse(&EAGER_BYTES[..n]),
                    Err(WireError::Truncated { .. }) | Err(WireError::BadMagic { .. })
                ) || n < 4
            );
        }
        assert!(matches!(
            FrameHeader::parse(&EAGER_BYTES[..55]),
            Err(WireError::Truncated { need: 56, have: 55 })
        ));
    }

    #[test]
    fn extension_bytes_are_skipped() {
        let mut b = [0u8; 64];
        b[..56].copy_from_slice(&EAGER_BYTES);
        b[3] = 64;
        assert_eq!(FrameHeader::parse(&b), Ok((eager(), 64)));
    }

    #[test]
    fn rejects_bad_fields() {
        let mut b = EAGER_BYTES;
        b[0] = b'X';
        assert!(matches!(
            FrameHeader::parse(&b),
            Err(WireError::BadMagic { .. })
        ));
        let mut b = EAGER_BYTES;
        b[2] = 9;
        assert_eq!(
            FrameHeader::parse(&b),
            Err(WireError::UnsupportedVersion { found: 9 })
        );
        let mut b = EAGER_BYTES;
        b[3] = 12;
        assert_eq!(
            FrameHeader::parse(&b),
            Err(WireError::BadHeaderLen { found: 12 })
        );
        let mut b = EAGER_BYTES;
        b[4] = 77;
        assert_eq!(
            FrameHeader::parse(&b),
            Err(WireError::UnknownKind { found: 77 })
        );
        let mut b = EAGER_BYTES;
        b[32] = 6; // length disagrees with payload_len
        assert!(matches!(
            FrameHeader::parse(&b),
            Err(WireError::Inconsistent { .. })
        ));
        let mut cts = FrameHeader::new(FrameKind::Cts);
        cts.payload_len = 1;
        assert!(matches!(
            FrameHeader::parse(&cts.to_bytes()),
            Err(WireError::Inconsistent { .. })
        ));
        let mut data = FrameHeader::new(FrameKind::Data);
        data.payload_len = 10;
        data.value = u64::MAX - 3;
        assert!(matches!(
            FrameHeader::parse(&data.to_bytes()),
            Err(WireError::Inconsistent { .. })
        ));
    }

    #[test]
    fn remote_memory_access_flags_only_where_they_mean_something() {
        let with = |kind, flags, value| {
            let mut h = FrameHeader::new(kind);
            h.flags = flags;
            h.value = value;
            h.payload_len = if kind == FrameKind::Data { 8 } else { 0 };
            FrameHeader::parse(&h.to_bytes()).map(|(h, _)| h.flags)
        };
        // Accepted: a write, a read request, a read's answer, refusals of either.
        assert_eq!(with(FrameKind::Rts, FLAG_RMA, 10), Ok(FLAG_RMA));
        assert_eq!(with(FrameKind::Rts, FLAG_RMA | FLAG_READ, 10), Ok(96));
        assert_eq!(with(FrameKind::Rts, FLAG_READ, 10), Ok(FLAG_READ));
        assert_eq!(with(FrameKind::Rts, FLAG_READ | FLAG_REFUSED, 0), Ok(192));
        assert_eq!(with(FrameKind::Eager, FLAG_READ, 0), Ok(FLAG_READ));
        assert_eq!(with(FrameKind::Eager, FLAG_RMA, 0), Ok(FLAG_RMA));
        assert_eq!(with(FrameKind::Cts, FLAG_REFUSED, 0), Ok(FLAG_REFUSED));
        // Refused: the flags on other kinds, a refusal that carries a length or asks something.
        for (kind, flags, value) in [
            (FrameKind::Data, FLAG_RMA, 0),
            (FrameKind::Cts, FLAG_READ, 0),
            (FrameKind::Eager, FLAG_RMA | FLAG_READ, 0),
            (FrameKind::Eager, FLAG_RMA | FLAG_REFUSED, 0),
            (FrameKind::Eager, FLAG_RMA | FLAG_DELIVERY, 0),
            (FrameKind::Eager, FLAG_READ | FLAG_DATA, 0),
            (FrameKind::Eager, FLAG_RMA | FLAG_DIRECT, 0),
            (FrameKind::Eager, FLAG_READ | FLAG_REFUSED, 0),
            (FrameKind::Fin, FLAG_RMA, 0),
            (FrameKind::Rts, FLAG_READ | FLAG_REFUSED, 5),
            (FrameKind::Rts, FLAG_RMA | FLAG_REFUSED, 0),
            (FrameKind::Rts, FLAG_REFUSED, 0),
            (FrameKind::Cts, FLAG_REFUSED | FLAG_DIRECT, 0),
            (FrameKind::Ack, FLAG_REFUSED, 0),
        ] {
            assert!(
                matches!(
                    with(kind, flags, value),
                    Err(WireError::Inconsistent { .. })
                ),
                "{kind:?} flags {flags} value {value}"
            );
        }
    }
}
