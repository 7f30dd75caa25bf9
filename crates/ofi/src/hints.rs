//! What fi_getinfo offers, and the strict check of an application's hints against it. Pure Rust
//! (owned mirrors of the C attribute structs) so every rule has a unit test without libfabric.
//! The checks follow libfabric's own util rules (prov/util/src/util_attr.c: ofi_check_info and
//! ofi_alter_info) plus a few stricter ones where we cannot honour a request: anything asked
//! that we cannot give is a refusal (-FI_ENODATA), never silently something else.

use crate::backend::{MAX_MSG_SIZE, NAME_LEN};
use crate::sys::*;

pub const PROV_NAME: &str = "hxcomm";
pub const FABRIC_NAME: &str = "hxcomm";
pub const DOMAIN_NAME: &str = "hxcomm";
/// Our own version number (fi_provider.version, shown as fabric_attr->prov_version).
pub const PROV_VERSION: u32 = fi_version(0, 1);
pub const MIN_API: u32 = fi_version(1, 5);

/// Sends up to this size may use fi_inject/fi_tinject: the bytes are copied, so the
/// caller's buffer is free at once. 4 KiB keeps the copy cheap and well below the engine's eager
/// limit (HX_EAGER_LIMIT, 32k), so injected sends never wait for rendezvous.
pub const INJECT_SIZE: usize = 4096;
pub const TX_SIZE: usize = 65536;
pub const RX_SIZE: usize = 65536;
/// Zero or one iov per operation.
pub const IOV_LIMIT: usize = 1;
pub const CQ_DATA_SIZE: usize = 8;
/// Error entries carry the backend's message (which peer failed) as a NUL-terminated err_data.
pub const MAX_ERR_DATA: usize = 256;
/// Registration is a no-op (we never need it), so any count and iov count is fine.
pub const MR_CNT: usize = 1 << 20;
pub const MR_IOV_LIMIT: usize = 1024;
/// hxcomm's wire protocol (crates/wire: version 2 since remote memory access).
pub const PROTOCOL_VERSION: u32 = 2;

pub const CAPS_PRIMARY: u64 =
    FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM;
/// Always available (returned whether asked or not, as libfabric's util providers do).
pub const CAPS_SECONDARY: u64 = FI_SOURCE;
/// Remote CQ data is an operation flag; support shows as `domain_attr->cq_data_size`. Hints
/// that name it among the caps get it back; unasked, it is not listed (fabtests' getinfo_test
/// counts it as an extra capability).
pub const CAPS_ACCEPTED: u64 = FI_REMOTE_CQ_DATA | CAPS_RMA | CAPS_ATOMIC;
/// Remote memory access (fi_read, fi_write; see mr.rs), given when asked for: a domain with
/// it keeps a table of registrations with keys, where consumers that never use RMA register
/// many regions under key 0 (which a table of requested keys would refuse).
pub const CAPS_RMA: u64 = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
/// Atomics on one element of a peer's registered memory (fi_atomic(3); see ep.rs), given when
/// asked for, as RMA is and on the same registrations.
pub const CAPS_ATOMIC: u64 = FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
/// Registration modes an RMA (or atomic) domain asks of the application when it allows them:
/// provider keys and virtual addresses (without them, its keys and offsets from a region's
/// start).
pub const RMA_MR_MODE: i32 = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
/// One remote range per fi_readmsg / fi_writemsg, one remote element per fi_atomicmsg.
pub const RMA_IOV_LIMIT: usize = 1;
pub const CAPS: u64 = CAPS_PRIMARY | CAPS_SECONDARY;
/// Domain-level caps (local/remote communication) belong to `info->caps` only.
pub const TX_CAPS: u64 = FI_MSG | FI_TAGGED | FI_SEND | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE;
pub const RX_CAPS: u64 = FI_MSG
    | FI_TAGGED
    | FI_RECV
    | FI_DIRECTED_RECV
    | FI_SOURCE
    | FI_RMA
    | FI_ATOMIC
    | FI_REMOTE_READ
    | FI_REMOTE_WRITE;
/// Rx-only caps libfabric tolerates (ignores) in tx_attr->caps, and the reverse.
const IGNORED_TX_CAPS: u64 = FI_REMOTE_READ
    | FI_REMOTE_WRITE
    | FI_RECV
    | FI_DIRECTED_RECV
    | FI_VARIABLE_MSG
    | FI_MULTI_RECV
    | FI_SOURCE
    | FI_RMA_EVENT
    | FI_SOURCE_ERR
    | FI_LOCAL_COMM
    | FI_REMOTE_COMM
    | FI_REMOTE_CQ_DATA;
const IGNORED_RX_CAPS: u64 = FI_READ
    | FI_WRITE
    | FI_SEND
    | FI_FENCE
    | FI_MULTICAST
    | FI_NAMED_RX_CTX
    | FI_LOCAL_COMM
    | FI_REMOTE_COMM
    | FI_REMOTE_CQ_DATA;
pub const DOMAIN_CAPS: u64 = FI_LOCAL_COMM | FI_REMOTE_COMM;
/// Inject-complete is what every send gives (the bytes are copied or on their way when the call
/// returns). Delivery-complete, asked for as a default or per send, makes a send complete once
/// the receiver has the message (Core::send_delivered; Open MPI's btl/ofi asks for it).
/// Transmit-complete is not claimed.
pub const TX_OP_FLAGS: u64 = FI_COMPLETION | FI_INJECT_COMPLETE | FI_DELIVERY_COMPLETE;
pub const RX_OP_FLAGS: u64 = FI_COMPLETION;
/// Per pair, messages are matched in the order they were sent. RAR/RAW/WAR/WAW concern RMA.
pub const MSG_ORDER: u64 = FI_ORDER_SAS;

/// Prefix of a src_addr that asks the endpoint to listen at node/service (fi_getinfo with
/// FI_SOURCE): our addresses are opaque 64-byte names, so the request travels in that form.
pub const LISTEN_MAGIC: &[u8; 8] = b"HXLISTEN";

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tx {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
    pub tclass: u32,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rx {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ep {
    pub ep_type: i32,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key: Option<Vec<u8>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Domain {
    pub name: Option<String>,
    pub threading: i32,
    pub control_progress: i32,
    pub data_progress: i32,
    pub resource_mgmt: i32,
    pub av_type: i32,
    pub mr_mode: i32,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub cntr_cnt: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub auth_key: Option<Vec<u8>>,
    pub max_err_data: usize,
    pub mr_cnt: usize,
    pub tclass: u32,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fabric {
    pub name: Option<String>,
    pub prov_name: Option<String>,
    pub prov_version: u32,
    pub api_version: u32,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Info {
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addr: Option<Vec<u8>>,
    pub dest_addr: Option<Vec<u8>>,
    pub tx: Option<Tx>,
    pub rx: Option<Rx>,
    pub ep: Option<Ep>,
    pub domain: Option<Domain>,
    pub fabric: Option<Fabric>,
}

/// What node/service/FI_SOURCE ask for.
#[derive(Clone, Debug, PartialEq)]
pub enum Addressing {
    None,
    /// Our endpoint should be found at node/service.
    Listen {
        node: Option<String>,
        service: Option<String>,
    },
    /// The peer listening at node/service.
    Resolve {
        node: String,
        service: String,
    },
}

pub fn addressing(node: Option<&str>, service: Option<&str>, flags: u64) -> Addressing {
    match (node, service) {
        (None, None) => Addressing::None,
        // A node alone names a host, not an endpoint: nothing to resolve (fabtests' multi_ep
        // asks like this for more endpoints of the same domain).
        (Some(_), None) if flags & FI_SOURCE == 0 => Addressing::None,
        _ if flags & FI_SOURCE != 0 => Addressing::Listen {
            node: node.map(str::to_owned),
            service: service.map(str::to_owned),
        },
        (n, s) => Addressing::Resolve {
            node: n.unwrap_or("").to_owned(),
            service: s.unwrap_or("").to_owned(),
        },
    }
}

pub fn encode_listen(node: Option<&str>, service: Option<&str>) -> Result<Vec<u8>, String> {
    let mut v = LISTEN_MAGIC.to_vec();
    for s in [node, service] {
        let s = s.unwrap_or("");
        if s.as_bytes().contains(&0) {
            return Err("node/service contains NUL".into());
        }
        v.extend_from_slice(s.as_bytes());
        v.push(0);
    }
    if v.len() > NAME_LEN {
        return Err(format!(
            "node and service too long for a {NAME_LEN}-byte address"
        ));
    }
    v.resize(NAME_LEN, 0);
    Ok(v)
}

/// (node, service) of a listen request made by [`encode_listen`]; None if `a` is not one.
pub fn decode_listen(a: &[u8]) -> Option<(Option<String>, Option<String>)> {
    if a.len() != NAME_LEN || !a.starts_with(LISTEN_MAGIC) {
        return None;
    }
    let mut parts = a[8..].splitn(3, |&b| b == 0);
    let node = std::str::from_utf8(parts.next()?).ok()?;
    let service = std::str::from_utf8(parts.next()?).ok()?;
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Some((opt(node), opt(service)))
}

/// The default offer (fi_getinfo without hints).
pub fn offer() -> Info {
    Info {
        caps: CAPS,
        mode: 0,
        addr_format: FI_FORMAT_UNSPEC,
        src_addr: None,
        dest_addr: None,
        tx: Some(Tx {
            caps: TX_CAPS & CAPS,
            op_flags: 0,
            msg_order: MSG_ORDER,
            comp_order: FI_ORDER_NONE,
            inject_size: INJECT_SIZE,
            size: TX_SIZE,
            iov_limit: IOV_LIMIT,
            ..Default::default()
        }),
        rx: Some(Rx {
            caps: RX_CAPS & CAPS,
            msg_order: MSG_ORDER,
            comp_order: FI_ORDER_NONE,
            size: RX_SIZE,
            iov_limit: IOV_LIMIT,
            ..Default::default()
        }),
        ep: Some(Ep {
            ep_type: FI_EP_RDM,
            protocol: FI_PROTO_UNSPEC,
            protocol_version: PROTOCOL_VERSION,
            max_msg_size: MAX_MSG_SIZE,
            mem_tag_format: u64::MAX,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            ..Default::default()
        }),
        domain: Some(Domain {
            name: Some(DOMAIN_NAME.into()),
            threading: FI_THREAD_SAFE,
            control_progress: FI_PROGRESS_MANUAL,
            data_progress: FI_PROGRESS_MANUAL,
            resource_mgmt: FI_RM_ENABLED,
            av_type: FI_AV_MAP,
            mr_mode: 0,
            mr_key_size: 8,
            cq_data_size: CQ_DATA_SIZE,
            cq_cnt: 1024,
            ep_cnt: 1024,
            tx_ctx_cnt: 1024,
            rx_ctx_cnt: 1024,
            max_ep_tx_ctx: 1,
            max_ep_rx_ctx: 1,
            max_ep_stx_ctx: 0,
            max_ep_srx_ctx: 0,
            cntr_cnt: 0,
            mr_iov_limit: MR_IOV_LIMIT,
            caps: DOMAIN_CAPS,
            mode: 0,
            auth_key: None,
            max_err_data: MAX_ERR_DATA,
            mr_cnt: MR_CNT,
            tclass: 0,
        }),
        fabric: Some(Fabric {
            name: Some(FABRIC_NAME.into()),
            // The core fills prov_name (setting it would give "hxcomm;hxcomm").
            prov_name: None,
            prov_version: PROV_VERSION,
            api_version: 0,
        }),
    }
}

macro_rules! refuse_if {
    ($cond:expr, $($msg:tt)*) => {
        if $cond {
            return Err(format!($($msg)*));
        }
    };
}

/// Caps we hand back for hint caps `h` (0 = not specified): as libfabric's ofi_get_caps, plus the
/// spec's defaults (send and receive when neither is named; local and remote communication when
/// neither is named).
fn out_caps(h: u64) -> u64 {
    if h == 0 {
        return CAPS;
    }
    let mut c = (h & (CAPS_PRIMARY | CAPS_ACCEPTED)) | CAPS_SECONDARY;
    if c & (FI_MSG | FI_TAGGED) != 0 && c & (FI_SEND | FI_RECV) == 0 {
        c |= FI_SEND | FI_RECV;
    }
    if c & (FI_LOCAL_COMM | FI_REMOTE_COMM) == 0 {
        c |= FI_LOCAL_COMM | FI_REMOTE_COMM;
    }
    // FI_RMA / FI_ATOMIC without a direction means all four (as libfabric's ofi_get_caps).
    if c & (FI_RMA | FI_ATOMIC) != 0
        && c & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) == 0
    {
        c |= FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    }
    c
}

/// Traffic classes are hints about the kind of traffic (latency, bulk data, ...): every rail
/// carries every class alike, so the named ones are accepted; DSCP values (0x100 | dscp) are not
/// set on the sockets, so they are refused rather than silently ignored.
fn known_tclass(t: u32) -> bool {
    // FI_TC_UNSPEC, and FI_TC_LABEL (0x200) + BEST_EFFORT .. NETWORK_CTRL.
    t == 0 || (0x200..=0x206).contains(&t)
}

fn valid_threading(t: i32) -> bool {
    (FI_THREAD_UNSPEC..=FI_THREAD_ENDPOINT).contains(&t)
}

/// Checks `hints` for API `version` and returns the one info we offer for them, or why not.
pub fn select(version: u32, hints: Option<&Info>) -> Result<Info, String> {
    refuse_if!(
        version < MIN_API,
        "API {}.{} is older than 1.5, which hxcomm needs",
        version >> 16,
        version & 0xffff
    );
    let mut out = offer();
    let Some(h) = hints else { return Ok(out) };

    // The endpoint type first: utility providers probe for MSG and DGRAM endpoints.
    if let Some(ep) = &h.ep {
        refuse_if!(
            ep.ep_type != FI_EP_UNSPEC && ep.ep_type != FI_EP_RDM,
            "endpoint type {} (only FI_EP_RDM)",
            ep.ep_type
        );
    }
    refuse_if!(
        h.caps & !(CAPS | CAPS_ACCEPTED) != 0,
        "caps {:#x} not supported",
        h.caps & !(CAPS | CAPS_ACCEPTED)
    );
    // hints->mode lists what the application can live with; we need none of it, so it never refuses.
    refuse_if!(
        h.addr_format != FI_FORMAT_UNSPEC,
        "address format {} (hxcomm names are opaque: FI_FORMAT_UNSPEC)",
        h.addr_format
    );
    if let Some(a) = &h.src_addr {
        refuse_if!(
            decode_listen(a).is_none(),
            "a src_addr other than a listen request from fi_getinfo(FI_SOURCE)"
        );
    }
    if let Some(a) = &h.dest_addr {
        refuse_if!(
            a.len() != NAME_LEN,
            "dest_addr of {} bytes (names are {NAME_LEN})",
            a.len()
        );
    }
    if let Some(f) = &h.fabric {
        if let Some(n) = &f.name {
            refuse_if!(n != FABRIC_NAME, "fabric {n:?} (ours is {FABRIC_NAME:?})");
        }
        refuse_if!(
            f.prov_version > PROV_VERSION,
            "provider version {:#x}",
            f.prov_version
        );
    }
    if let Some(d) = &h.domain {
        check_domain(version, h.caps, d)?;
    }
    if let Some(ep) = &h.ep {
        check_ep(ep)?;
    }
    if let Some(tx) = &h.tx {
        check_tx(tx)?;
    }
    if let Some(rx) = &h.rx {
        check_rx(rx)?;
    }

    // Accepted: shape the offer after the hints (ofi_alter_info).
    out.caps = out_caps(h.caps);
    out.src_addr = h.src_addr.clone();
    out.dest_addr = h.dest_addr.clone();
    // Atomics reach a peer's registrations as RMA does: the same remote ranges and modes.
    let rma = out.caps & (FI_RMA | FI_ATOMIC) != 0;
    let otx = out.tx.as_mut().unwrap();
    otx.caps = out.caps & TX_CAPS;
    if rma {
        otx.rma_iov_limit = RMA_IOV_LIMIT;
    }
    if let Some(tx) = &h.tx {
        otx.op_flags = tx.op_flags;
        if tx.inject_size != 0 {
            otx.inject_size = tx.inject_size;
        }
        if tx.size != 0 {
            otx.size = tx.size;
        }
    }
    let orx = out.rx.as_mut().unwrap();
    orx.caps = out.caps & RX_CAPS;
    if let Some(rx) = &h.rx {
        orx.op_flags = rx.op_flags;
        if rx.size != 0 {
            orx.size = rx.size;
        }
    }
    let od = out.domain.as_mut().unwrap();
    if let Some(d) = &h.domain {
        // FI_THREAD_SAFE satisfies every model: hand back the one asked for.
        if d.threading != FI_THREAD_UNSPEC {
            od.threading = d.threading;
        }
        if d.resource_mgmt != FI_RM_UNSPEC {
            od.resource_mgmt = d.resource_mgmt;
        }
        if d.av_type != FI_AV_UNSPEC {
            od.av_type = d.av_type;
        }
        // The deprecated 1.0 forms are echoed (as libfabric does); otherwise messages need
        // no mode, and RMA takes provider keys and virtual addresses where they are allowed.
        if d.mr_mode & (FI_MR_BASIC | FI_MR_SCALABLE) != 0 {
            od.mr_mode = d.mr_mode;
        } else if rma {
            od.mr_mode = d.mr_mode & RMA_MR_MODE;
        }
        od.auth_key = d.auth_key.clone();
    }
    if let (Some(e), Some(oe)) = (&h.ep, out.ep.as_mut()) {
        oe.auth_key = e.auth_key.clone();
    }
    Ok(out)
}

fn check_domain(version: u32, _caps: u64, d: &Domain) -> Result<(), String> {
    if let Some(n) = &d.name {
        refuse_if!(n != DOMAIN_NAME, "domain {n:?} (ours is {DOMAIN_NAME:?})");
    }
    refuse_if!(
        !valid_threading(d.threading),
        "threading model {}",
        d.threading
    );
    for (what, p) in [("control", d.control_progress), ("data", d.data_progress)] {
        refuse_if!(
            p != FI_PROGRESS_UNSPEC && p != FI_PROGRESS_MANUAL,
            "{what} progress {p} (hxcomm progresses only inside fi_cq_read: FI_PROGRESS_MANUAL)"
        );
    }
    refuse_if!(
        !(FI_RM_UNSPEC..=FI_RM_ENABLED).contains(&d.resource_mgmt),
        "resource management {}",
        d.resource_mgmt
    );
    refuse_if!(
        !(FI_AV_UNSPEC..=FI_AV_TABLE).contains(&d.av_type),
        "AV type {}",
        d.av_type
    );
    let m = d.mr_mode;
    // API >= 1.5: FI_MR_BASIC and FI_MR_SCALABLE are whole modes of their own and may not be
    // combined with other bits; every other bit is a permission we never need.
    refuse_if!(
        version >= MIN_API
            && m & (FI_MR_BASIC | FI_MR_SCALABLE) != 0
            && m & !(FI_MR_BASIC | FI_MR_SCALABLE) != 0
            || m & (FI_MR_BASIC | FI_MR_SCALABLE) == (FI_MR_BASIC | FI_MR_SCALABLE),
        "mr_mode {m:#x} mixes FI_MR_BASIC/FI_MR_SCALABLE with other bits"
    );
    refuse_if!(
        d.cq_data_size > CQ_DATA_SIZE,
        "cq_data_size {} (at most {CQ_DATA_SIZE})",
        d.cq_data_size
    );
    refuse_if!(d.cntr_cnt > 0, "counters (cntr_cnt {})", d.cntr_cnt);
    refuse_if!(
        d.mr_iov_limit > MR_IOV_LIMIT,
        "mr_iov_limit {}",
        d.mr_iov_limit
    );
    refuse_if!(
        d.caps & !DOMAIN_CAPS != 0,
        "domain caps {:#x}",
        d.caps & !DOMAIN_CAPS
    );
    refuse_if!(
        d.max_err_data > MAX_ERR_DATA,
        "max_err_data {}",
        d.max_err_data
    );
    refuse_if!(d.mr_cnt > MR_CNT, "mr_cnt {}", d.mr_cnt);
    refuse_if!(
        d.max_ep_tx_ctx > 1 || d.max_ep_rx_ctx > 1,
        "more than one tx/rx context per endpoint"
    );
    refuse_if!(
        d.max_ep_stx_ctx > 0 || d.max_ep_srx_ctx > 0,
        "shared contexts"
    );
    refuse_if!(!known_tclass(d.tclass), "traffic class {:#x}", d.tclass);
    Ok(())
}

fn check_ep(ep: &Ep) -> Result<(), String> {
    refuse_if!(ep.protocol != FI_PROTO_UNSPEC, "protocol {}", ep.protocol);
    refuse_if!(
        ep.protocol_version > PROTOCOL_VERSION,
        "protocol version {}",
        ep.protocol_version
    );
    refuse_if!(
        ep.max_msg_size > MAX_MSG_SIZE,
        "max_msg_size {} (at most {MAX_MSG_SIZE})",
        ep.max_msg_size
    );
    refuse_if!(
        ep.tx_ctx_cnt > 1 || ep.rx_ctx_cnt > 1,
        "tx/rx context count {}/{} (scalable or shared contexts)",
        ep.tx_ctx_cnt,
        ep.rx_ctx_cnt
    );
    Ok(())
}

fn check_order(what: &str, msg_order: u64, comp_order: u64) -> Result<(), String> {
    refuse_if!(
        msg_order & !MSG_ORDER != 0,
        "{what} msg_order {:#x} (only FI_ORDER_SAS)",
        msg_order & !MSG_ORDER
    );
    refuse_if!(
        comp_order != FI_ORDER_NONE,
        "{what} comp_order {comp_order:#x} (none given)"
    );
    Ok(())
}

fn check_tx(tx: &Tx) -> Result<(), String> {
    let caps = tx.caps & !IGNORED_TX_CAPS;
    refuse_if!(caps & !TX_CAPS != 0, "tx caps {:#x}", caps & !TX_CAPS);
    refuse_if!(
        tx.op_flags & !TX_OP_FLAGS != 0,
        "tx op_flags {:#x}",
        tx.op_flags & !TX_OP_FLAGS
    );
    check_order("tx", tx.msg_order, tx.comp_order)?;
    refuse_if!(
        tx.inject_size > INJECT_SIZE,
        "inject_size {} (at most {INJECT_SIZE})",
        tx.inject_size
    );
    refuse_if!(tx.size > TX_SIZE, "tx size {} (at most {TX_SIZE})", tx.size);
    refuse_if!(
        tx.iov_limit > IOV_LIMIT,
        "tx iov_limit {} (at most {IOV_LIMIT})",
        tx.iov_limit
    );
    refuse_if!(
        tx.rma_iov_limit > RMA_IOV_LIMIT,
        "rma_iov_limit {} (at most {RMA_IOV_LIMIT})",
        tx.rma_iov_limit
    );
    refuse_if!(!known_tclass(tx.tclass), "traffic class {:#x}", tx.tclass);
    Ok(())
}

fn check_rx(rx: &Rx) -> Result<(), String> {
    let caps = rx.caps & !IGNORED_RX_CAPS;
    refuse_if!(caps & !RX_CAPS != 0, "rx caps {:#x}", caps & !RX_CAPS);
    refuse_if!(
        rx.op_flags & !RX_OP_FLAGS != 0,
        "rx op_flags {:#x}",
        rx.op_flags & !RX_OP_FLAGS
    );
    check_order("rx", rx.msg_order, rx.comp_order)?;
    // total_buffered_recv only means something with FI_BUFFERED_RECV mode, which we never use.
    refuse_if!(rx.size > RX_SIZE, "rx size {} (at most {RX_SIZE})", rx.size);
    refuse_if!(
        rx.iov_limit > IOV_LIMIT,
        "rx iov_limit {} (at most {IOV_LIMIT})",
        rx.iov_limit
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: u32 = fi_version(1, 17);

    fn ompi() -> Info {
        Info {
            caps: FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV,
            mode: FI_CONTEXT | FI_CONTEXT2,
            tx: Some(Tx {
                msg_order: FI_ORDER_SAS,
                op_flags: FI_COMPLETION,
                ..Default::default()
            }),
            rx: Some(Rx {
                msg_order: FI_ORDER_SAS,
                op_flags: FI_COMPLETION,
                ..Default::default()
            }),
            ep: Some(Ep {
                ep_type: FI_EP_RDM,
                ..Default::default()
            }),
            domain: Some(Domain {
                threading: FI_THREAD_DOMAIN,
                resource_mgmt: FI_RM_ENABLED,
                av_type: FI_AV_MAP,
                cq_data_size: 4,
                ..Default::default()
            }),
            fabric: Some(Fabric::default()),
            ..Default::default()
        }
    }

    fn refused(h: &Info) -> String {
        select(V, Some(h)).expect_err("should be refused")
    }

    #[test]
    fn no_hints_gives_the_full_offer() {
        let o = select(V, None).unwrap();
        assert_eq!(o, offer());
        assert_eq!(o.mode, 0);
        assert_eq!(o.ep.as_ref().unwrap().ep_type, FI_EP_RDM);
        assert!(o.fabric.as_ref().unwrap().prov_name.is_none());
        assert_eq!(o.fabric.as_ref().unwrap().name.as_deref(), Some("hxcomm"));
        assert_eq!(o.domain.as_ref().unwrap().cq_data_size, 8);
    }

    #[test]
    fn empty_hints_as_fi_info_passes_them() {
        let h = Info {
            ep: Some(Ep::default()),
            domain: Some(Domain::default()),
            fabric: Some(Fabric::default()),
            tx: Some(Tx::default()),
            rx: Some(Rx::default()),
            ..Default::default()
        };
        let o = select(V, Some(&h)).unwrap();
        assert_eq!(o.caps, CAPS);
        assert_eq!(o.domain.unwrap().av_type, FI_AV_MAP);
    }

    #[test]
    fn open_mpi_hints_are_accepted_as_asked() {
        let o = select(fi_version(1, 5), Some(&ompi())).unwrap();
        assert_eq!(o.mode, 0, "we need neither FI_CONTEXT nor FI_CONTEXT2");
        let d = o.domain.unwrap();
        assert_eq!(d.threading, FI_THREAD_DOMAIN);
        assert_eq!(d.control_progress, FI_PROGRESS_MANUAL);
        assert_eq!(d.av_type, FI_AV_MAP);
        assert_eq!(d.mr_mode, 0);
        assert_eq!(d.cq_data_size, 8);
        assert_eq!(
            o.caps & CAPS_PRIMARY,
            FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV | FI_SEND | FI_RECV
        );
        assert_ne!(o.caps & FI_SOURCE, 0);
        assert_eq!(o.tx.unwrap().op_flags, FI_COMPLETION);
        assert_eq!(o.rx.unwrap().msg_order, FI_ORDER_SAS);
        let mut t = ompi();
        t.domain.as_mut().unwrap().av_type = FI_AV_TABLE;
        t.domain.as_mut().unwrap().threading = FI_THREAD_SAFE;
        let d = select(V, Some(&t)).unwrap().domain.unwrap();
        assert_eq!((d.av_type, d.threading), (FI_AV_TABLE, FI_THREAD_SAFE));
        for th in [FI_THREAD_COMPLETION, FI_THREAD_ENDPOINT, FI_THREAD_FID] {
            t.domain.as_mut().unwrap().threading = th;
            assert_eq!(select(V, Some(&t)).unwrap().domain.unwrap().threading, th);
        }
    }

    #[test]
    fn other_endpoint_types_are_refused() {
        for t in [FI_EP_MSG, FI_EP_DGRAM, 4, 5] {
            let mut h = ompi();
            h.ep.as_mut().unwrap().ep_type = t;
            assert!(refused(&h).contains("endpoint type"));
        }
        let mut h = ompi();
        h.ep.as_mut().unwrap().ep_type = FI_EP_UNSPEC;
        assert!(select(V, Some(&h)).is_ok());
    }

    #[test]
    fn remote_memory_access_when_asked() {
        // Not asked: not given, and registrations need no mode.
        let out = select(V, Some(&ompi())).unwrap();
        assert_eq!(out.caps & CAPS_RMA, 0);
        assert_eq!(out.domain.as_ref().unwrap().mr_mode, 0);
        // FI_RMA alone: every direction, on the sides they belong to; provider keys and virtual
        // addresses where the application allows them, never what it did not.
        let mut h = ompi();
        h.caps |= FI_RMA;
        h.domain.as_mut().unwrap().mr_mode =
            FI_MR_LOCAL | FI_MR_ENDPOINT | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        let out = select(V, Some(&h)).unwrap();
        assert_eq!(out.caps & CAPS_RMA, CAPS_RMA);
        let tx = out.tx.as_ref().unwrap();
        assert_eq!(tx.caps & CAPS_RMA, FI_RMA | FI_READ | FI_WRITE);
        assert_eq!(tx.rma_iov_limit, 1);
        assert_eq!(
            out.rx.as_ref().unwrap().caps & CAPS_RMA,
            FI_RMA | FI_REMOTE_READ | FI_REMOTE_WRITE
        );
        assert_eq!(
            out.domain.as_ref().unwrap().mr_mode,
            FI_MR_VIRT_ADDR | FI_MR_PROV_KEY
        );
        // Reads only; an application that allows no mode gets its own keys and offsets.
        let mut h = ompi();
        h.caps |= FI_RMA | FI_READ;
        h.domain.as_mut().unwrap().mr_mode = FI_MR_LOCAL;
        let out = select(V, Some(&h)).unwrap();
        assert_eq!(out.caps & CAPS_RMA, FI_RMA | FI_READ);
        assert_eq!(out.domain.as_ref().unwrap().mr_mode, 0);
        // The 1.0 modes are echoed.
        let mut h = ompi();
        h.caps |= FI_RMA;
        h.domain.as_mut().unwrap().mr_mode = FI_MR_SCALABLE;
        let out = select(V, Some(&h)).unwrap();
        assert_eq!(out.domain.as_ref().unwrap().mr_mode, FI_MR_SCALABLE);
    }

    #[test]
    fn atomics_when_asked() {
        // Not asked: not given.
        let out = select(V, Some(&ompi())).unwrap();
        assert_eq!(out.caps & FI_ATOMIC, 0);
        assert_eq!(offer().caps & FI_ATOMIC, 0);
        // fabtests' fi_rdm_atomic: FI_MSG | FI_ATOMIC. Every direction, on the sides they
        // belong to; RMA's remote range limit and registration modes; no FI_RMA.
        let mut h = ompi();
        h.caps = FI_MSG | FI_ATOMIC;
        h.domain.as_mut().unwrap().mr_mode =
            FI_MR_LOCAL | FI_MR_ENDPOINT | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        let out = select(V, Some(&h)).unwrap();
        assert_eq!(out.caps & (CAPS_ATOMIC | FI_RMA), CAPS_ATOMIC);
        assert_eq!(
            out.caps & CAPS_PRIMARY,
            FI_MSG | FI_SEND | FI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM
        );
        let tx = out.tx.as_ref().unwrap();
        assert_eq!(tx.caps & CAPS_ATOMIC, FI_ATOMIC | FI_READ | FI_WRITE);
        assert_eq!(tx.rma_iov_limit, 1);
        assert_eq!(
            out.rx.as_ref().unwrap().caps & CAPS_ATOMIC,
            FI_ATOMIC | FI_REMOTE_READ | FI_REMOTE_WRITE
        );
        assert_eq!(
            out.domain.as_ref().unwrap().mr_mode,
            FI_MR_VIRT_ADDR | FI_MR_PROV_KEY
        );
        // A direction named is kept as asked; with FI_RMA both come back.
        let mut h = ompi();
        h.caps |= FI_ATOMIC | FI_WRITE;
        h.domain.as_mut().unwrap().mr_mode = FI_MR_LOCAL;
        let out = select(V, Some(&h)).unwrap();
        assert_eq!(out.caps & CAPS_ATOMIC, FI_ATOMIC | FI_WRITE);
        assert_eq!(out.domain.as_ref().unwrap().mr_mode, 0);
        let mut h = ompi();
        h.caps |= FI_ATOMIC | FI_RMA;
        let out = select(V, Some(&h)).unwrap();
        assert_eq!(out.caps & (CAPS_ATOMIC | CAPS_RMA), CAPS_ATOMIC | CAPS_RMA);
        // Asked on the sides.
        let mut h = ompi();
        h.caps |= FI_ATOMIC;
        h.tx.as_mut().unwrap().caps = FI_TAGGED | FI_ATOMIC | FI_READ | FI_WRITE;
        h.rx.as_mut().unwrap().caps = FI_TAGGED | FI_RECV | FI_ATOMIC | FI_REMOTE_WRITE;
        assert!(select(V, Some(&h)).is_ok());
    }

    #[test]
    fn unsupported_caps_are_refused() {
        for c in [
            FI_COLLECTIVE,
            FI_MULTICAST,
            FI_MULTI_RECV,
            FI_HMEM,
            FI_SHARED_AV,
            FI_NAMED_RX_CTX,
            FI_TRIGGER,
            FI_AV_USER_ID,
            FI_RMA_EVENT,
            FI_SOURCE_ERR,
        ] {
            let mut h = ompi();
            h.caps |= c;
            assert!(refused(&h).contains("caps"), "{c:#x}");
        }
        let mut h = ompi();
        h.tx.as_mut().unwrap().caps = FI_TAGGED | FI_COLLECTIVE;
        assert!(refused(&h).contains("tx caps"));
        let mut h = ompi();
        h.rx.as_mut().unwrap().caps = FI_TAGGED | FI_RECV | FI_MULTI_RECV;
        assert!(refused(&h).contains("rx caps"));
        let mut h = ompi();
        h.domain.as_mut().unwrap().caps = FI_SHARED_AV;
        assert!(refused(&h).contains("domain caps"));
        // Rx-only caps in tx_attr are ignored, as libfabric does.
        let mut h = ompi();
        h.tx.as_mut().unwrap().caps = FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV;
        assert!(select(V, Some(&h)).is_ok());
    }

    #[test]
    fn caps_defaults() {
        let h = Info {
            caps: FI_MSG,
            ..Default::default()
        };
        let c = select(V, Some(&h)).unwrap().caps;
        assert_eq!(
            c & CAPS_PRIMARY,
            FI_MSG | FI_SEND | FI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM
        );
        let h = Info {
            caps: FI_TAGGED | FI_RECV | FI_REMOTE_COMM,
            ..Default::default()
        };
        assert_eq!(
            select(V, Some(&h)).unwrap().caps & CAPS_PRIMARY,
            FI_TAGGED | FI_RECV | FI_REMOTE_COMM
        );
    }

    #[test]
    fn side_caps_never_exceed_the_info_caps() {
        let mut rma = ompi();
        rma.caps |= FI_RMA;
        let mut atomic = ompi();
        atomic.caps = FI_MSG | FI_ATOMIC;
        let mut atomic_write = ompi();
        atomic_write.caps |= FI_ATOMIC | FI_WRITE;
        for out in [
            offer(),
            select(V, None).unwrap(),
            select(V, Some(&ompi())).unwrap(),
            select(V, Some(&rma)).unwrap(),
            select(V, Some(&atomic)).unwrap(),
            select(V, Some(&atomic_write)).unwrap(),
        ] {
            let (tx, rx) = (out.tx.unwrap().caps, out.rx.unwrap().caps);
            assert_eq!(tx & !out.caps, 0, "tx caps {tx:#x} beyond {:#x}", out.caps);
            assert_eq!(rx & !out.caps, 0, "rx caps {rx:#x} beyond {:#x}", out.caps);
        }
    }

    #[test]
    fn modes_never_refuse_and_come_back_zero() {
        let mut h = ompi();
        h.mode =
            FI_CONTEXT | FI_CONTEXT2 | FI_MSG_PREFIX | FI_LOCAL_MR | FI_RX_CQ_DATA | FI_ASYNC_IOV;
        assert_eq!(select(V, Some(&h)).unwrap().mode, 0);
        h.mode = 0;
        assert_eq!(select(V, Some(&h)).unwrap().mode, 0);
    }

    #[test]
    fn ordering_is_sas_only() {
        let mut h = ompi();
        h.tx.as_mut().unwrap().msg_order = FI_ORDER_SAS | (1 << 0);
        assert!(refused(&h).contains("msg_order"));
        let mut h = ompi();
        h.rx.as_mut().unwrap().msg_order = FI_ORDER_STRICT;
        assert!(refused(&h).contains("msg_order"));
        let mut h = ompi();
        h.tx.as_mut().unwrap().comp_order = FI_ORDER_STRICT;
        assert!(refused(&h).contains("comp_order"));
        let mut h = ompi();
        h.rx.as_mut().unwrap().comp_order = 1 << 16; // FI_ORDER_DATA
        assert!(refused(&h).contains("comp_order"));
    }

    #[test]
    fn auto_progress_is_refused() {
        let mut h = ompi();
        h.domain.as_mut().unwrap().data_progress = FI_PROGRESS_AUTO;
        assert!(refused(&h).contains("data progress"));
        let mut h = ompi();
        h.domain.as_mut().unwrap().control_progress = FI_PROGRESS_AUTO;
        assert!(refused(&h).contains("control progress"));
        let mut h = ompi();
        h.domain.as_mut().unwrap().data_progress = FI_PROGRESS_MANUAL;
        assert!(select(V, Some(&h)).is_ok());
    }

    #[test]
    fn mr_modes() {
        for ok in [
            0,
            FI_MR_LOCAL,
            FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT,
            FI_MR_BASIC,
            FI_MR_SCALABLE,
        ] {
            let mut h = ompi();
            h.domain.as_mut().unwrap().mr_mode = ok;
            let d = select(V, Some(&h)).unwrap().domain.unwrap();
            let expect = if ok & (FI_MR_BASIC | FI_MR_SCALABLE) != 0 {
                ok
            } else {
                0
            };
            assert_eq!(d.mr_mode, expect, "{ok:#x}");
        }
        for bad in [
            FI_MR_BASIC | FI_MR_LOCAL,
            FI_MR_SCALABLE | FI_MR_VIRT_ADDR,
            FI_MR_BASIC | FI_MR_SCALABLE,
        ] {
            let mut h = ompi();
            h.domain.as_mut().unwrap().mr_mode = bad;
            assert!(refused(&h).contains("mr_mode"), "{bad:#x}");
        }
    }

    #[test]
    fn names_must_match() {
        let mut h = ompi();
        h.fabric.as_mut().unwrap().name = Some("TCP-IP".into());
        assert!(refused(&h).contains("fabric"));
        let mut h = ompi();
        h.domain.as_mut().unwrap().name = Some("eth0".into());
        assert!(refused(&h).contains("domain"));
        let mut h = ompi();
        h.fabric.as_mut().unwrap().name = Some("hxcomm".into());
        h.domain.as_mut().unwrap().name = Some("hxcomm".into());
        assert!(select(V, Some(&h)).is_ok());
        let mut h = ompi();
        h.fabric.as_mut().unwrap().prov_version = fi_version(9, 0);
        assert!(refused(&h).contains("provider version"));
    }

    #[test]
    fn sizes_and_limits() {
        type Case = (fn(&mut Info), &'static str);
        let cases: Vec<Case> = vec![
            (
                |h| h.domain.as_mut().unwrap().cq_data_size = 16,
                "cq_data_size",
            ),
            (|h| h.domain.as_mut().unwrap().cntr_cnt = 1, "counters"),
            (
                |h| h.domain.as_mut().unwrap().max_err_data = 4096,
                "max_err_data",
            ),
            (
                |h| h.domain.as_mut().unwrap().tclass = 0x100 | 46,
                "traffic class",
            ),
            (|h| h.domain.as_mut().unwrap().av_type = 7, "AV type"),
            (|h| h.domain.as_mut().unwrap().threading = 9, "threading"),
            (
                |h| h.ep.as_mut().unwrap().max_msg_size = usize::MAX,
                "max_msg_size",
            ),
            (
                |h| h.ep.as_mut().unwrap().tx_ctx_cnt = usize::MAX,
                "context count",
            ),
            (|h| h.ep.as_mut().unwrap().rx_ctx_cnt = 2, "context count"),
            (|h| h.ep.as_mut().unwrap().protocol = 6, "protocol"),
            (
                |h| h.tx.as_mut().unwrap().inject_size = INJECT_SIZE + 1,
                "inject_size",
            ),
            (|h| h.tx.as_mut().unwrap().iov_limit = 2, "iov_limit"),
            (|h| h.rx.as_mut().unwrap().iov_limit = 4, "iov_limit"),
            (|h| h.tx.as_mut().unwrap().size = TX_SIZE + 1, "tx size"),
            (|h| h.rx.as_mut().unwrap().size = RX_SIZE * 2, "rx size"),
            (
                |h| h.tx.as_mut().unwrap().rma_iov_limit = 2,
                "rma_iov_limit",
            ),
            (
                |h| h.tx.as_mut().unwrap().op_flags = FI_TRANSMIT_COMPLETE,
                "op_flags",
            ),
            (
                |h| h.rx.as_mut().unwrap().op_flags = FI_MULTI_RECV,
                "op_flags",
            ),
            (|h| h.addr_format = FI_SOCKADDR_IN, "address format"),
            (|h| h.addr_format = FI_ADDR_STR, "address format"),
            (|h| h.src_addr = Some(vec![1; 16]), "src_addr"),
            (|h| h.dest_addr = Some(vec![1; 16]), "dest_addr"),
        ];
        for (f, what) in cases {
            let mut h = ompi();
            f(&mut h);
            let e = refused(&h);
            assert!(e.contains(what), "{what}: {e}");
        }
        // Smaller requests come back as asked.
        let mut h = ompi();
        h.tx.as_mut().unwrap().inject_size = 64;
        h.tx.as_mut().unwrap().size = 100;
        h.ep.as_mut().unwrap().max_msg_size = 1 << 20;
        let o = select(V, Some(&h)).unwrap();
        assert_eq!(
            (o.tx.as_ref().unwrap().inject_size, o.tx.unwrap().size),
            (64, 100)
        );
        assert_eq!(o.ep.unwrap().max_msg_size, MAX_MSG_SIZE);
    }

    #[test]
    fn old_api_is_refused() {
        assert!(select(fi_version(1, 4), None).unwrap_err().contains("1.5"));
        assert!(select(fi_version(1, 5), None).is_ok());
    }

    #[test]
    fn addressing_and_listen_requests() {
        assert_eq!(addressing(None, None, FI_SOURCE), Addressing::None);
        assert_eq!(
            addressing(None, Some("9228"), FI_SOURCE),
            Addressing::Listen {
                node: None,
                service: Some("9228".into())
            }
        );
        assert_eq!(
            addressing(Some("h1"), Some("9228"), 0),
            Addressing::Resolve {
                node: "h1".into(),
                service: "9228".into()
            }
        );
        let l = encode_listen(Some("10.0.0.1"), Some("9228")).unwrap();
        assert_eq!(l.len(), NAME_LEN);
        assert_eq!(
            decode_listen(&l),
            Some((Some("10.0.0.1".into()), Some("9228".into())))
        );
        assert_eq!(
            decode_listen(&encode_listen(None, Some("1")).unwrap()),
            Some((None, Some("1".into())))
        );
        assert!(encode_listen(Some(&"x".repeat(60)), None).is_err());
        // A listen request is an acceptable src_addr hint and comes back.
        let mut h = ompi();
        h.src_addr = Some(l.clone());
        assert_eq!(select(V, Some(&h)).unwrap().src_addr, Some(l));
        let mut h = ompi();
        h.dest_addr = Some(vec![7; NAME_LEN]);
        assert_eq!(
            select(V, Some(&h)).unwrap().dest_addr,
            Some(vec![7; NAME_LEN])
        );
    }

    #[test]
    fn auth_keys_travel() {
        let mut h = ompi();
        h.domain.as_mut().unwrap().auth_key = Some(b"secret".to_vec());
        assert_eq!(
            select(V, Some(&h))
                .unwrap()
                .domain
                .unwrap()
                .auth_key
                .as_deref(),
            Some(&b"secret"[..])
        );
    }
}
