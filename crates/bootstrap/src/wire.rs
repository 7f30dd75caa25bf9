//! Wire format of the bootstrap key-value protocol.
//!
//! Why it looks like this: every message is a length-prefixed binary frame, so values may hold any
//! text (spaces, newlines) without escaping, and the receiver knows the size before reading the body
//! and can refuse anything larger than [`MAX_FRAME`] without allocating it. Decoding is a pure function
//! over a byte slice ([`decode_request`], [`decode_response`]) so it can be fuzzed and tested with fixed
//! bytes, with no socket involved.
//!
//! Connection layout:
//! ```text
//! server -> client   hello:  "HXB1" nonce[16]
//! client -> server   auth:   "HXB1" rank:u32le mac[32]   mac = HMAC-SHA256(secret, "hxcomm-bootstrap" | nonce | rank_le)
//! server -> client   frame:  Welcome{size}               (or the server closes the connection)
//! then requests and responses, one response per request, each a frame:
//! frame    = len:u32le body[len]                         (len <= MAX_FRAME)
//! request  = 1 key_len:u16le key val_len:u32le value     Put
//!          | 2 timeout_ms:u32le key_len:u16le key        Get
//!          | 3 timeout_ms:u32le                          Fence
//! response = 0                                           Ok
//!          | 1 val_len:u32le value                       Value
//!          | 2                                           Timeout
//!          | 3 msg_len:u16le msg                         Error
//!          | 4 size:u32le                                Welcome
//! ```
//! Keys, values and messages are UTF-8.

use std::fmt;

/// First bytes of the server hello and of the client's answer.
pub const MAGIC: [u8; 4] = *b"HXB1";
/// Length of the random nonce the server sends.
pub const NONCE_LEN: usize = 16;
/// Length of the server hello: magic and nonce.
pub const HELLO_LEN: usize = MAGIC.len() + NONCE_LEN;
/// Length of the client's authentication message: magic, rank, MAC.
pub const AUTH_LEN: usize = MAGIC.len() + 4 + 32;
/// Domain separation string mixed into the authentication MAC.
pub const AUTH_LABEL: &[u8] = b"hxcomm-bootstrap";
/// Largest key, in bytes.
pub const MAX_KEY: usize = 256;
/// Largest value, in bytes.
pub const MAX_VALUE: usize = 64 * 1024;
/// Largest frame body: a put with the largest key and value.
pub const MAX_FRAME: usize = 1 + 2 + MAX_KEY + 4 + MAX_VALUE;
/// Largest error message carried in a response.
pub const MAX_MESSAGE: usize = 1024;

const OP_PUT: u8 = 1;
const OP_GET: u8 = 2;
const OP_FENCE: u8 = 3;

const ST_OK: u8 = 0;
const ST_VALUE: u8 = 1;
const ST_TIMEOUT: u8 = 2;
const ST_ERROR: u8 = 3;
const ST_WELCOME: u8 = 4;

/// A request from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Store `value` under `key` (overwrites).
    Put { key: String, value: String },
    /// Wait up to `timeout_ms` until `key` is present, then return its value.
    Get { key: String, timeout_ms: u32 },
    /// Wait up to `timeout_ms` until every rank has fenced as often as this one.
    Fence { timeout_ms: u32 },
}

/// A response from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// Put or fence done.
    Ok,
    /// The value of a get.
    Value(String),
    /// A get or fence waited for its whole timeout.
    Timeout,
    /// The server refused the request.
    Error(String),
    /// Sent once after successful authentication, with the job size.
    Welcome { size: u32 },
}

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// More bytes are needed: at least `need` in total.
    Incomplete { need: usize },
    /// The length prefix announces a body larger than [`MAX_FRAME`].
    FrameTooLong(usize),
    /// Unknown operation or status byte.
    UnknownOp(u8),
    /// A field runs past the end of the frame.
    Truncated(&'static str),
    /// The frame has bytes left after the message.
    TrailingBytes(usize),
    /// Key longer than [`MAX_KEY`].
    KeyTooLong(usize),
    /// Value longer than [`MAX_VALUE`].
    ValueTooLong(usize),
    /// A text field is not UTF-8.
    NotUtf8(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Incomplete { need } => write!(f, "incomplete frame, need {need} bytes"),
            DecodeError::FrameTooLong(n) => {
                write!(f, "frame length {n} exceeds the maximum {MAX_FRAME}")
            }
            DecodeError::UnknownOp(op) => write!(f, "unknown operation byte {op:#04x}"),
            DecodeError::Truncated(what) => write!(f, "{what} runs past the end of the frame"),
            DecodeError::TrailingBytes(n) => write!(f, "{n} unexpected bytes after the message"),
            DecodeError::KeyTooLong(n) => {
                write!(f, "key of {n} bytes exceeds the maximum {MAX_KEY}")
            }
            DecodeError::ValueTooLong(n) => {
                write!(f, "value of {n} bytes exceeds the maximum {MAX_VALUE}")
            }
            DecodeError::NotUtf8(what) => write!(f, "{what} is not valid UTF-8"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A cursor over a frame body that never reads out of bounds.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated(what));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn text(&mut self, n: usize, what: &'static str) -> Result<String, DecodeError> {
        let b = self.take(n, what)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| DecodeError::NotUtf8(what))
    }
    fn finish(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes(self.buf.len()))
        }
    }
}

/// Splits one frame off the front of `bytes`: returns its body and the total bytes it takes.
pub fn split_frame(bytes: &[u8]) -> Result<(&[u8], usize), DecodeError> {
    if bytes.len() < 4 {
        return Err(DecodeError::Incomplete { need: 4 });
    }
    let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    if len > MAX_FRAME {
        return Err(DecodeError::FrameTooLong(len));
    }
    let total = 4 + len;
    if bytes.len() < total {
        return Err(DecodeError::Incomplete { need: total });
    }
    Ok((&bytes[4..total], total))
}

/// Decodes one request frame from the front of `bytes`; returns it and the bytes consumed.
/// Pure and total: any input gives a value or an error, never a panic (fuzz target).
pub fn decode_request(bytes: &[u8]) -> Result<(Request, usize), DecodeError> {
    let (body, used) = split_frame(bytes)?;
    let mut r = Reader { buf: body };
    let req = match r.u8("operation")? {
        OP_PUT => {
            let klen = r.u16("key length")? as usize;
            if klen > MAX_KEY {
                return Err(DecodeError::KeyTooLong(klen));
            }
            let key = r.text(klen, "key")?;
            let vlen = r.u32("value length")? as usize;
            if vlen > MAX_VALUE {
                return Err(DecodeError::ValueTooLong(vlen));
            }
            let value = r.text(vlen, "value")?;
            Request::Put { key, value }
        }
        OP_GET => {
            let timeout_ms = r.u32("timeout")?;
            let klen = r.u16("key length")? as usize;
            if klen > MAX_KEY {
                return Err(DecodeError::KeyTooLong(klen));
            }
            let key = r.text(klen, "key")?;
            Request::Get { key, timeout_ms }
        }
        OP_FENCE => Request::Fence {
            timeout_ms: r.u32("timeout")?,
        },
        op => return Err(DecodeError::UnknownOp(op)),
    };
    r.finish()?;
    Ok((req, used))
}

/// Decodes one response frame from the front of `bytes`; returns it and the bytes consumed.
pub fn decode_response(bytes: &[u8]) -> Result<(Response, usize), DecodeError> {
    let (body, used) = split_frame(bytes)?;
    let mut r = Reader { buf: body };
    let resp = match r.u8("status")? {
        ST_OK => Response::Ok,
        ST_VALUE => {
            let vlen = r.u32("value length")? as usize;
            if vlen > MAX_VALUE {
                return Err(DecodeError::ValueTooLong(vlen));
            }
            Response::Value(r.text(vlen, "value")?)
        }
        ST_TIMEOUT => Response::Timeout,
        ST_ERROR => {
            let n = r.u16("message length")? as usize;
            Response::Error(r.text(n, "message")?)
        }
        ST_WELCOME => Response::Welcome {
            size: r.u32("size")?,
        },
        op => return Err(DecodeError::UnknownOp(op)),
    };
    r.finish()?;
    Ok((resp, used))
}

fn frame(body: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Encodes a request as one frame. The caller checks the key and value limits first; an
/// oversized request encodes but the peer rejects it.
pub fn encode_request(req: &Request) -> Vec<u8> {
    let mut b = Vec::new();
    match req {
        Request::Put { key, value } => {
            b.push(OP_PUT);
            b.extend_from_slice(&(key.len() as u16).to_le_bytes());
            b.extend_from_slice(key.as_bytes());
            b.extend_from_slice(&(value.len() as u32).to_le_bytes());
            b.extend_from_slice(value.as_bytes());
        }
        Request::Get { key, timeout_ms } => {
            b.push(OP_GET);
            b.extend_from_slice(&timeout_ms.to_le_bytes());
            b.extend_from_slice(&(key.len() as u16).to_le_bytes());
            b.extend_from_slice(key.as_bytes());
        }
        Request::Fence { timeout_ms } => {
            b.push(OP_FENCE);
            b.extend_from_slice(&timeout_ms.to_le_bytes());
        }
    }
    frame(b)
}

/// Encodes a response as one frame (error messages are cut to [`MAX_MESSAGE`] bytes).
pub fn encode_response(resp: &Response) -> Vec<u8> {
    let mut b = Vec::new();
    match resp {
        Response::Ok => b.push(ST_OK),
        Response::Value(v) => {
            b.push(ST_VALUE);
            b.extend_from_slice(&(v.len() as u32).to_le_bytes());
            b.extend_from_slice(v.as_bytes());
        }
        Response::Timeout => b.push(ST_TIMEOUT),
        Response::Error(msg) => {
            let mut end = msg.len().min(MAX_MESSAGE);
            while !msg.is_char_boundary(end) {
                end -= 1;
            }
            b.push(ST_ERROR);
            b.extend_from_slice(&(end as u16).to_le_bytes());
            b.extend_from_slice(&msg.as_bytes()[..end]);
        }
        Response::Welcome { size } => {
            b.push(ST_WELCOME);
            b.extend_from_slice(&size.to_le_bytes());
        }
    }
    frame(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_fixed_bytes() {
        let req = Request::Put {
            key: "ab".into(),
            value: "x y\n".into(),
        };
        let bytes = encode_request(&req);
        assert_eq!(
            bytes,
            [13, 0, 0, 0, 1, 2, 0, b'a', b'b', 4, 0, 0, 0, b'x', b' ', b'y', b'\n']
        );
        assert_eq!(decode_request(&bytes).unwrap(), (req, bytes.len()));
    }

    #[test]
    fn get_and_fence_fixed_bytes() {
        let get = Request::Get {
            key: "k".into(),
            timeout_ms: 0x0102,
        };
        let bytes = encode_request(&get);
        assert_eq!(bytes, [8, 0, 0, 0, 2, 2, 1, 0, 0, 1, 0, b'k']);
        assert_eq!(decode_request(&bytes).unwrap(), (get, 12));
        let fence = Request::Fence { timeout_ms: 7 };
        let bytes = encode_request(&fence);
        assert_eq!(bytes, [5, 0, 0, 0, 3, 7, 0, 0, 0]);
        assert_eq!(decode_request(&bytes).unwrap(), (fence, 9));
    }

    #[test]
    fn responses_round_trip() {
        for resp in [
            Response::Ok,
            Response::Value("v a l".into()),
            Response::Timeout,
            Response::Error("nope".into()),
            Response::Welcome { size: 4 },
        ] {
            let bytes = encode_response(&resp);
            assert_eq!(decode_response(&bytes).unwrap(), (resp, bytes.len()));
        }
    }

    #[test]
    fn decode_consumes_only_one_frame() {
        let mut bytes = encode_request(&Request::Fence { timeout_ms: 1 });
        let n = bytes.len();
        bytes.extend_from_slice(&encode_request(&Request::Fence { timeout_ms: 2 }));
        assert_eq!(decode_request(&bytes).unwrap().1, n);
        assert_eq!(
            decode_request(&bytes[n..]).unwrap().0,
            Request::Fence { timeout_ms: 2 }
        );
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(
            decode_request(&[1, 0]),
            Err(DecodeError::Incomplete { need: 4 })
        );
        assert_eq!(
            decode_request(&[5, 0, 0, 0, 3]),
            Err(DecodeError::Incomplete { need: 9 })
        );
        assert_eq!(
            decode_request(&[0xff, 0xff, 0xff, 0xff]),
            Err(DecodeError::FrameTooLong(0xffff_ffff))
        );
        assert_eq!(
            decode_request(&[1, 0, 0, 0, 9]),
            Err(DecodeError::UnknownOp(9))
        );
        assert_eq!(
            decode_request(&[0, 0, 0, 0]),
            Err(DecodeError::Truncated("operation"))
        );
        // Key length 0x1000 > MAX_KEY.
        assert_eq!(
            decode_request(&[3, 0, 0, 0, 1, 0, 0x10]),
            Err(DecodeError::KeyTooLong(0x1000))
        );
        // Key runs past the end.
        assert_eq!(
            decode_request(&[4, 0, 0, 0, 1, 5, 0, b'a']),
            Err(DecodeError::Truncated("key"))
        );
        // Not UTF-8.
        assert_eq!(
            decode_request(&[8, 0, 0, 0, 1, 1, 0, 0xff, 0, 0, 0, 0]),
            Err(DecodeError::NotUtf8("key"))
        );
        // Trailing bytes.
        assert_eq!(
            decode_request(&[6, 0, 0, 0, 3, 0, 0, 0, 0, 9]),
            Err(DecodeError::TrailingBytes(1))
        );
        // Value too long.
        let mut b = vec![0, 0, 0, 0, 1, 0, 0];
        b.extend_from_slice(&((MAX_VALUE + 1) as u32).to_le_bytes());
        let len = (b.len() - 4) as u32;
        b[..4].copy_from_slice(&len.to_le_bytes());
        assert_eq!(
            decode_request(&b),
            Err(DecodeError::ValueTooLong(MAX_VALUE + 1))
        );
    }

    #[test]
    fn decoder_total_on_pseudo_random_bytes() {
        // A cheap stand-in for the fuzz target: every prefix of many random buffers decodes or
        // errors without panicking.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            let mut buf = Vec::new();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 40) as usize;
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(x as u8);
            }
            if len >= 5 {
                // Make the length prefix plausible half of the time.
                if x & 1 == 0 {
                    let l = (len - 4) as u32;
                    buf[..4].copy_from_slice(&l.to_le_bytes());
                    buf[4] = (x >> 8) as u8 % 5;
                }
            }
            for end in 0..=buf.len() {
                let _ = decode_request(&buf[..end]);
                let _ = decode_response(&buf[..end]);
            }
        }
    }
}
