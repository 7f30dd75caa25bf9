//! The PMI-1 "simple" wire protocol, without I/O: requests to text lines, reply lines to values.
//!
//! Why it is built this way: MPICH's Hydra (`mpiexec`) and Slurm's `srun --mpi=pmi2` start
//! processes with a socket to a PMI server (`PMI_FD`, or `PMI_PORT` to connect to) over which the
//! process asks for its job's key-value space one text line at a time. Everything here is a pure
//! function over bytes, so the decoder can be fuzzed and tested with fixed lines; the socket side is
//! [`crate::PmiClient`].
//!
//! A line is `cmd=NAME key=value key=value ...\n`: fields separated by spaces, each split at its
//! first `=`, nothing quoted or escaped (what MPICH's `PMIU_parse_keyvals` accepts). So keys, the
//! kvs name and values must not hold spaces, `=` or newlines: [`encode_value`] turns any text into
//! such a value (plain if it is made of letters, digits and `._:,/+-@`, else `~` and hex).
//!
//! Requests (client -> server) and the replies this client expects:
//! ```text
//! cmd=init pmi_version=1 pmi_subversion=1        cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0
//! cmd=initack pmiid=ID      (PMI_PORT only)      cmd=initack, then cmd=set size=N, cmd=set rank=R, cmd=set debug=D
//! cmd=get_maxes                                  cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024
//! cmd=get_my_kvsname                             cmd=my_kvsname kvsname=NAME
//! cmd=put kvsname=NAME key=K value=V             cmd=put_result rc=0
//! cmd=get kvsname=NAME key=K                     cmd=get_result rc=0 value=V   (rc != 0: not there)
//! cmd=barrier_in                                 cmd=barrier_out
//! cmd=finalize                                   cmd=finalize_ack
//! cmd=abort exitcode=N                           (none: the launcher ends the job)
//! ```
//! Servers add fields (`msg=success`, `rc=0` on more replies); unknown fields are ignored.

use std::fmt;

/// Longest reply line accepted, newline included. Hydra's longest (a get of a 1024-byte value)
/// is about 1.1 KB; a line this long without a newline is an error, not a reason to buffer more.
pub const MAX_REPLY_LINE: usize = 4096;
/// Longest request line sent, newline included: MPICH's client buffer (`PMIU_MAXLINE`), and
/// Slurm's PMI-1 server reads each request with a single read of at most this many bytes.
pub const MAX_REQUEST_LINE: usize = 1024;
/// Most fields in one reply line.
pub const MAX_FIELDS: usize = 32;
/// Largest limit a server may announce in `cmd=maxes` (anything larger is taken as garbage).
pub const MAX_ANNOUNCED_LIMIT: usize = 1 << 20;

/// A request to the PMI server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// Version handshake (PMI 1.1).
    Init,
    /// First line on a `PMI_PORT` connection: which process this is.
    InitAck { pmiid: u32 },
    /// The server's key, value and kvs-name length limits.
    GetMaxes,
    /// The name of the job's key-value space.
    GetMyKvsname,
    /// Stores a pair; visible to other processes after the next barrier.
    Put {
        kvsname: &'a str,
        key: &'a str,
        value: &'a str,
    },
    /// Looks a key up; does not wait for it to be put.
    Get { kvsname: &'a str, key: &'a str },
    /// Enters the barrier of all processes of the job.
    BarrierIn,
    /// Leaves the job cleanly.
    Finalize,
    /// Asks the launcher to end the whole job.
    Abort { exitcode: i32 },
}

impl Request<'_> {
    /// The `cmd` of the reply this request expects (`None`: no reply).
    pub fn reply_cmd(&self) -> Option<&'static str> {
        Some(match self {
            Request::Init => "response_to_init",
            Request::InitAck { .. } => "initack",
            Request::GetMaxes => "maxes",
            Request::GetMyKvsname => "my_kvsname",
            Request::Put { .. } => "put_result",
            Request::Get { .. } => "get_result",
            Request::BarrierIn => "barrier_out",
            Request::Finalize => "finalize_ack",
            Request::Abort { .. } => return None,
        })
    }
}

/// A request that cannot be written as one PMI-1 line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// A field is empty or holds a space, `=`, `;` or a non-printable character.
    BadToken { field: &'static str, value: String },
    /// The whole line would be longer than [`MAX_REQUEST_LINE`].
    TooLong { len: usize, max: usize },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::BadToken { field, value } => write!(
                f,
                "{field} {:?} cannot be carried by PMI-1 (empty, or holds a space, '=', ';' or a non-printable character)",
                shorten(value)
            ),
            EncodeError::TooLong { len, max } => write!(
                f,
                "the request line would be {len} bytes; PMI-1 servers read at most {max}"
            ),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Whether `s` can stand as a key, kvs name or value in a PMI-1 line: printable ASCII, no
/// space, no `=` (fields split at it), no `;` (Slurm's PMI-2 separator), not empty.
pub fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'=' && b != b';')
}

fn token<'a>(field: &'static str, value: &'a str) -> Result<&'a str, EncodeError> {
    if is_token(value) {
        Ok(value)
    } else {
        Err(EncodeError::BadToken {
            field,
            value: value.to_owned(),
        })
    }
}

/// The line for `r`, newline included.
pub fn encode_request(r: &Request<'_>) -> Result<String, EncodeError> {
    let line = match *r {
        Request::Init => "cmd=init pmi_version=1 pmi_subversion=1\n".to_owned(),
        Request::InitAck { pmiid } => format!("cmd=initack pmiid={pmiid}\n"),
        Request::GetMaxes => "cmd=get_maxes\n".to_owned(),
        Request::GetMyKvsname => "cmd=get_my_kvsname\n".to_owned(),
        Request::Put {
            kvsname,
            key,
            value,
        } => format!(
            "cmd=put kvsname={} key={} value={}\n",
            token("kvs name", kvsname)?,
            token("key", key)?,
            token("value", value)?
        ),
        Request::Get { kvsname, key } => format!(
            "cmd=get kvsname={} key={}\n",
            token("kvs name", kvsname)?,
            token("key", key)?
        ),
        Request::BarrierIn => "cmd=barrier_in\n".to_owned(),
        Request::Finalize => "cmd=finalize\n".to_owned(),
        Request::Abort { exitcode } => format!("cmd=abort exitcode={exitcode}\n"),
    };
    if line.len() > MAX_REQUEST_LINE {
        return Err(EncodeError::TooLong {
            len: line.len(),
            max: MAX_REQUEST_LINE,
        });
    }
    Ok(line)
}

/// A reply line that is not what PMI-1 allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// No newline within [`MAX_REPLY_LINE`] bytes.
    LineTooLong { max: usize },
    /// A byte outside printable ASCII (column counted from 0).
    NotPrintable { at: usize, byte: u8 },
    /// An empty line.
    Empty,
    /// The line does not start with `cmd=` and a command name.
    NoCmd { line: String },
    /// A field without `=`, or with nothing before it.
    BadField { at: usize, field: String },
    /// More than [`MAX_FIELDS`] fields.
    TooManyFields { max: usize },
    /// A field the reply must have is missing.
    Missing {
        cmd: &'static str,
        field: &'static str,
    },
    /// A field that must be a number in range is not.
    BadNumber { field: &'static str, value: String },
    /// A name (kvs name, set key) that cannot be used as a PMI token.
    BadToken { field: &'static str, value: String },
    /// A value written by [`encode_value`] that does not decode.
    BadValue { value: String, why: &'static str },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DecodeError::*;
        match self {
            LineTooLong { max } => write!(f, "no end of line within {max} bytes"),
            NotPrintable { at, byte } => {
                write!(f, "byte 0x{byte:02x} at column {at} is not printable ASCII")
            }
            Empty => write!(f, "empty line"),
            NoCmd { line } => write!(f, "line does not start with cmd=NAME: {line:?}"),
            BadField { at, field } => {
                write!(f, "field {field:?} at column {at} is not key=value")
            }
            TooManyFields { max } => write!(f, "more than {max} fields"),
            Missing { cmd, field } => write!(f, "cmd={cmd} without the field {field}"),
            BadNumber { field, value } => {
                write!(f, "field {field}={value:?} is not a number in range")
            }
            BadToken { field, value } => write!(f, "field {field}={value:?} is not a usable name"),
            BadValue { value, why } => write!(f, "value {value:?}: {why}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// At most 80 characters of `s`, for error messages.
pub(crate) fn shorten(s: &str) -> String {
    if s.len() <= 80 {
        s.to_owned()
    } else {
        let mut end = 77;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    }
}

/// Finds the first complete line in `buf`: `Some((line without its newline, bytes used))`,
/// `None` if more bytes are needed, an error if [`MAX_REPLY_LINE`] bytes hold no newline.
pub fn split_line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, DecodeError> {
    let window = &buf[..buf.len().min(MAX_REPLY_LINE)];
    match window.iter().position(|&b| b == b'\n') {
        Some(i) => Ok(Some((&window[..i], i + 1))),
        None if buf.len() >= MAX_REPLY_LINE => Err(DecodeError::LineTooLong {
            max: MAX_REPLY_LINE,
        }),
        None => Ok(None),
    }
}

/// The fields of one line (without its newline): `cmd` first, then the others in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields<'a> {
    pub cmd: &'a str,
    pub rest: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    /// The first field named `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.rest.iter().find(|(k, _)| *k == key).map(|&(_, v)| v)
    }
}

/// Splits a line (without its newline) into fields.
pub fn parse_fields(line: &[u8]) -> Result<Fields<'_>, DecodeError> {
    if let Some(at) = line
        .iter()
        .position(|&b| !(b == b' ' || b.is_ascii_graphic()))
    {
        return Err(DecodeError::NotPrintable { at, byte: line[at] });
    }
    // Printable ASCII only, so this cannot fail; no panic either way.
    let text = std::str::from_utf8(line).map_err(|e| DecodeError::NotPrintable {
        at: e.valid_up_to(),
        byte: line.get(e.valid_up_to()).copied().unwrap_or(0),
    })?;
    let mut fields = Vec::new();
    let mut at = 0;
    for tok in text.split(' ') {
        let start = at;
        at += tok.len() + 1;
        if tok.is_empty() {
            continue;
        }
        let Some((k, v)) = tok.split_once('=') else {
            return Err(DecodeError::BadField {
                at: start,
                field: shorten(tok),
            });
        };
        if k.is_empty() {
            return Err(DecodeError::BadField {
                at: start,
                field: shorten(tok),
            });
        }
        if fields.len() == MAX_FIELDS {
            return Err(DecodeError::TooManyFields { max: MAX_FIELDS });
        }
        fields.push((k, v));
    }
    match fields.first() {
        None => Err(DecodeError::Empty),
        Some(&("cmd", cmd)) if !cmd.is_empty() => Ok(Fields {
            cmd,
            rest: fields[1..].to_vec(),
        }),
        Some(_) => Err(DecodeError::NoCmd {
            line: shorten(text),
        }),
    }
}

/// A reply from the PMI server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Answer to [`Request::Init`]; `rc` 0 accepts PMI 1.1 (absent counts as 0).
    ResponseToInit { rc: i64 },
    /// First answer to [`Request::InitAck`].
    InitAck,
    /// One of the lines after `cmd=initack`: `cmd=set size=4`.
    Set { key: String, value: String },
    /// The server's limits, in bytes (C string sizes: room for a terminating NUL included).
    Maxes {
        kvsname_max: usize,
        keylen_max: usize,
        vallen_max: usize,
    },
    /// The job's key-value space.
    MyKvsname { kvsname: String },
    /// Answer to a put; `rc` absent counts as 0.
    PutResult { rc: i64, msg: Option<String> },
    /// Answer to a get: `rc` 0 and the value, or `rc` != 0 (not there).
    GetResult {
        rc: i64,
        value: Option<String>,
        msg: Option<String>,
    },
    /// End of a barrier; `rc` absent counts as 0.
    BarrierOut { rc: i64 },
    /// Answer to finalize.
    FinalizeAck,
    /// Any other command.
    Other { cmd: String },
}

impl Reply {
    /// The reply's `cmd`.
    pub fn cmd(&self) -> &str {
        match self {
            Reply::ResponseToInit { .. } => "response_to_init",
            Reply::InitAck => "initack",
            Reply::Set { .. } => "set",
            Reply::Maxes { .. } => "maxes",
            Reply::MyKvsname { .. } => "my_kvsname",
            Reply::PutResult { .. } => "put_result",
            Reply::GetResult { .. } => "get_result",
            Reply::BarrierOut { .. } => "barrier_out",
            Reply::FinalizeAck => "finalize_ack",
            Reply::Other { cmd } => cmd,
        }
    }
}

fn rc_of(f: &Fields<'_>, required: Option<&'static str>) -> Result<i64, DecodeError> {
    match f.get("rc") {
        None => match required {
            Some(cmd) => Err(DecodeError::Missing { cmd, field: "rc" }),
            None => Ok(0),
        },
        Some(v) => v.parse().map_err(|_| DecodeError::BadNumber {
            field: "rc",
            value: shorten(v),
        }),
    }
}

fn limit_of(f: &Fields<'_>, field: &'static str) -> Result<usize, DecodeError> {
    let v = f.get(field).ok_or(DecodeError::Missing {
        cmd: "maxes",
        field,
    })?;
    match v.parse::<usize>() {
        Ok(n) if (1..=MAX_ANNOUNCED_LIMIT).contains(&n) => Ok(n),
        _ => Err(DecodeError::BadNumber {
            field,
            value: shorten(v),
        }),
    }
}

/// Decodes one reply line (without its newline).
pub fn decode_reply(line: &[u8]) -> Result<Reply, DecodeError> {
    let f = parse_fields(line)?;
    let opt = |k: &str| f.get(k).map(str::to_owned);
    Ok(match f.cmd {
        "response_to_init" => Reply::ResponseToInit {
            rc: rc_of(&f, None)?,
        },
        "initack" => Reply::InitAck,
        "set" => {
            let &(k, v) = f.rest.first().ok_or(DecodeError::Missing {
                cmd: "set",
                field: "a key=value",
            })?;
            if !is_token(k) {
                return Err(DecodeError::BadToken {
                    field: "set",
                    value: shorten(k),
                });
            }
            Reply::Set {
                key: k.to_owned(),
                value: v.to_owned(),
            }
        }
        "maxes" => Reply::Maxes {
            kvsname_max: limit_of(&f, "kvsname_max")?,
            keylen_max: limit_of(&f, "keylen_max")?,
            vallen_max: limit_of(&f, "vallen_max")?,
        },
        "my_kvsname" => {
            let k = f.get("kvsname").ok_or(DecodeError::Missing {
                cmd: "my_kvsname",
                field: "kvsname",
            })?;
            if !is_token(k) {
                return Err(DecodeError::BadToken {
                    field: "kvsname",
                    value: shorten(k),
                });
            }
            Reply::MyKvsname {
                kvsname: k.to_owned(),
            }
        }
        "put_result" => Reply::PutResult {
            rc: rc_of(&f, None)?,
            msg: opt("msg"),
        },
        "get_result" => {
            let rc = rc_of(&f, Some("get_result"))?;
            let value = opt("value");
            if rc == 0 && value.is_none() {
                return Err(DecodeError::Missing {
                    cmd: "get_result",
                    field: "value",
                });
            }
            Reply::GetResult {
                rc,
                value,
                msg: opt("msg"),
            }
        }
        "barrier_out" => Reply::BarrierOut {
            rc: rc_of(&f, None)?,
        },
        "finalize_ack" => Reply::FinalizeAck,
        other => Reply::Other {
            cmd: shorten(other),
        },
    })
}

fn plain_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"._:,/+-@".contains(&b)
}

/// `v` as a PMI value: itself if it is non-empty and made only of letters, digits and
/// `._:,/+-@`; otherwise `~` followed by the hex of its bytes (so any text fits, at twice the size).
pub fn encode_value(v: &str) -> String {
    if !v.is_empty() && v.bytes().all(plain_byte) {
        return v.to_owned();
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(1 + 2 * v.len());
    out.push('~');
    for b in v.bytes() {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    out
}

/// The text [`encode_value`] made `v` from. A value of another writer that holds no `~` comes
/// back as it is.
pub fn decode_value(v: &str) -> Result<String, DecodeError> {
    let Some(hex) = v.strip_prefix('~') else {
        return Ok(v.to_owned());
    };
    let bad = |why| DecodeError::BadValue {
        value: shorten(v),
        why,
    };
    let b = hex.as_bytes();
    if b.len() % 2 != 0 {
        return Err(bad("odd number of hex digits after '~'"));
    }
    let nib = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len() / 2);
    for pair in b.chunks_exact(2) {
        match (nib(pair[0]), nib(pair[1])) {
            (Some(h), Some(l)) => out.push(h << 4 | l),
            _ => return Err(bad("not hex after '~'")),
        }
    }
    String::from_utf8(out).map_err(|_| bad("hex after '~' is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests() {
        assert_eq!(
            encode_request(&Request::Init).unwrap(),
            "cmd=init pmi_version=1 pmi_subversion=1\n"
        );
        assert_eq!(
            encode_request(&Request::InitAck { pmiid: 3 }).unwrap(),
            "cmd=initack pmiid=3\n"
        );
        assert_eq!(
            encode_request(&Request::Put {
                kvsname: "kvs_1_0",
                key: "hx.addr.0",
                value: "00ff"
            })
            .unwrap(),
            "cmd=put kvsname=kvs_1_0 key=hx.addr.0 value=00ff\n"
        );
        assert_eq!(
            encode_request(&Request::Get {
                kvsname: "k",
                key: "a"
            })
            .unwrap(),
            "cmd=get kvsname=k key=a\n"
        );
        assert_eq!(
            encode_request(&Request::Abort { exitcode: -1 }).unwrap(),
            "cmd=abort exitcode=-1\n"
        );
        for bad in ["", "a b", "a=b", "a;b", "a\nb", "ä"] {
            let e = encode_request(&Request::Put {
                kvsname: "k",
                key: bad,
                value: "v",
            })
            .unwrap_err();
            assert!(
                matches!(e, EncodeError::BadToken { field: "key", .. }),
                "{e}"
            );
        }
        let long = "v".repeat(MAX_REQUEST_LINE);
        let e = encode_request(&Request::Put {
            kvsname: "k",
            key: "a",
            value: &long,
        })
        .unwrap_err();
        assert!(e.to_string().contains("1024"), "{e}");
        assert_eq!(Request::BarrierIn.reply_cmd(), Some("barrier_out"));
        assert_eq!(Request::Abort { exitcode: 1 }.reply_cmd(), None);
    }

    #[test]
    fn hydra_replies() {
        // Lines as Hydra 4.0.2 sends them (captured on this machine).
        let d = |s: &str| decode_reply(s.as_bytes());
        assert_eq!(
            d("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0").unwrap(),
            Reply::ResponseToInit { rc: 0 }
        );
        assert_eq!(
            d("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024").unwrap(),
            Reply::Maxes {
                kvsname_max: 256,
                keylen_max: 64,
                vallen_max: 1024
            }
        );
        assert_eq!(
            d("cmd=my_kvsname kvsname=kvs_24868_0_324425379_vm").unwrap(),
            Reply::MyKvsname {
                kvsname: "kvs_24868_0_324425379_vm".into()
            }
        );
        assert_eq!(
            d("cmd=put_result rc=0 msg=success").unwrap(),
            Reply::PutResult {
                rc: 0,
                msg: Some("success".into())
            }
        );
        assert_eq!(
            d("cmd=get_result rc=0 msg=success value=v1").unwrap(),
            Reply::GetResult {
                rc: 0,
                value: Some("v1".into()),
                msg: Some("success".into())
            }
        );
        assert_eq!(
            d("cmd=get_result rc=-1 msg=key_k0_not_found value=unknown").unwrap(),
            Reply::GetResult {
                rc: -1,
                value: Some("unknown".into()),
                msg: Some("key_k0_not_found".into())
            }
        );
        assert_eq!(d("cmd=barrier_out").unwrap(), Reply::BarrierOut { rc: 0 });
        assert_eq!(d("cmd=finalize_ack").unwrap(), Reply::FinalizeAck);
        assert_eq!(d("cmd=initack").unwrap(), Reply::InitAck);
        assert_eq!(
            d("cmd=set size=4").unwrap(),
            Reply::Set {
                key: "size".into(),
                value: "4".into()
            }
        );
        // Slurm's forms: rc on more replies, a get miss without value.
        assert_eq!(
            d("cmd=get_result rc=1").unwrap(),
            Reply::GetResult {
                rc: 1,
                value: None,
                msg: None
            }
        );
        assert_eq!(
            d("cmd=barrier_out rc=0").unwrap(),
            Reply::BarrierOut { rc: 0 }
        );
        assert_eq!(
            d("cmd=spawn_result rc=0").unwrap(),
            Reply::Other {
                cmd: "spawn_result".into()
            }
        );
        // Values may hold '=' after the first one; extra spaces are fine.
        assert_eq!(
            d("cmd=get_result  rc=0 value=a=b ").unwrap(),
            Reply::GetResult {
                rc: 0,
                value: Some("a=b".into()),
                msg: None
            }
        );
    }

    #[test]
    fn malformed_replies() {
        let d = |s: &[u8]| decode_reply(s).unwrap_err();
        assert_eq!(d(b""), DecodeError::Empty);
        assert_eq!(d(b"   "), DecodeError::Empty);
        assert!(matches!(d(b"hello"), DecodeError::BadField { .. }));
        assert!(matches!(d(b"rc=0 cmd=x"), DecodeError::NoCmd { .. }));
        assert!(matches!(d(b"cmd= a=b"), DecodeError::NoCmd { .. }));
        assert!(matches!(
            d(b"cmd=x =y"),
            DecodeError::BadField { at: 6, .. }
        ));
        assert!(matches!(
            d(b"cmd=x \x01"),
            DecodeError::NotPrintable { at: 6, byte: 1 }
        ));
        assert!(matches!(d(b"cmd=x \xff"), DecodeError::NotPrintable { .. }));
        assert!(matches!(
            d(b"cmd=get_result value=x"),
            DecodeError::Missing { field: "rc", .. }
        ));
        assert!(matches!(
            d(b"cmd=get_result rc=0"),
            DecodeError::Missing { field: "value", .. }
        ));
        assert!(matches!(
            d(b"cmd=get_result rc=zero value=1"),
            DecodeError::BadNumber { field: "rc", .. }
        ));
        assert!(matches!(
            d(b"cmd=maxes kvsname_max=256 keylen_max=0 vallen_max=1024"),
            DecodeError::BadNumber {
                field: "keylen_max",
                ..
            }
        ));
        assert!(matches!(
            d(b"cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=99999999999999999999999"),
            DecodeError::BadNumber { .. }
        ));
        assert!(matches!(
            d(b"cmd=maxes kvsname_max=256 keylen_max=64"),
            DecodeError::Missing {
                field: "vallen_max",
                ..
            }
        ));
        assert!(matches!(d(b"cmd=my_kvsname"), DecodeError::Missing { .. }));
        assert!(matches!(
            d(b"cmd=my_kvsname kvsname="),
            DecodeError::BadToken { .. }
        ));
        assert!(matches!(d(b"cmd=set"), DecodeError::Missing { .. }));
        let many = format!("cmd=x{}", " a=b".repeat(MAX_FIELDS));
        assert!(matches!(
            d(many.as_bytes()),
            DecodeError::TooManyFields { .. }
        ));
        // Messages stay short however long the input.
        let e = d(format!("x{}", "y".repeat(3000)).as_bytes()).to_string();
        assert!(e.len() < 200, "{e}");
    }

    #[test]
    fn line_splitting() {
        assert_eq!(split_line(b"").unwrap(), None);
        assert_eq!(split_line(b"cmd=a").unwrap(), None);
        assert_eq!(
            split_line(b"cmd=a\ncmd=b\n").unwrap(),
            Some((&b"cmd=a"[..], 6))
        );
        let long = vec![b'x'; MAX_REPLY_LINE];
        assert_eq!(
            split_line(&long).unwrap_err(),
            DecodeError::LineTooLong {
                max: MAX_REPLY_LINE
            }
        );
        let mut ok = vec![b'x'; MAX_REPLY_LINE - 1];
        ok.push(b'\n');
        ok.extend_from_slice(b"more");
        assert_eq!(split_line(&ok).unwrap().unwrap().1, MAX_REPLY_LINE);
    }

    #[test]
    fn values_round_trip() {
        for v in [
            "00ff",
            "made:0123",
            "",
            "a b",
            "x=y",
            "~",
            "~00",
            "ä\n;",
            "10.0.0.1:5000",
        ] {
            let e = encode_value(v);
            assert!(is_token(&e), "{v:?} -> {e:?}");
            assert_eq!(decode_value(&e).unwrap(), v);
        }
        assert_eq!(encode_value("hx-1.0"), "hx-1.0");
        assert_eq!(encode_value("a b"), "~612062");
        assert!(decode_value("~6").is_err());
        assert!(decode_value("~zz").is_err());
        assert!(decode_value("~ff").is_err());
        assert_eq!(decode_value("unknown").unwrap(), "unknown");
    }
}
