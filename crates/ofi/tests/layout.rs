//! Checks every struct, field offset and constant of src/sys.rs against the installed libfabric
//! headers: a generated C program prints them, and any difference fails the test.

use hxcomm_fi::sys::*;
use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::process::Command;

macro_rules! structs {
    ($( $s:ident { $($f:ident $(= $cf:ident)?),* $(,)? } )*) => {{
        let mut c = String::new();
        let mut r = BTreeMap::new();
        $(
            c += &format!("P(\"sizeof {0}\", sizeof(struct {0}));\n", stringify!($s));
            r.insert(format!("sizeof {}", stringify!($s)), size_of::<$s>() as u64);
            $(
                let cf = structs!(@c $f $($cf)?);
                c += &format!("P(\"{0}.{1}\", offsetof(struct {0}, {1}));\n", stringify!($s), cf);
                r.insert(format!("{}.{}", stringify!($s), cf), offset_of!($s, $f) as u64);
            )*
        )*
        (c, r)
    }};
    (@c $f:ident) => { stringify!($f) };
    (@c $f:ident $cf:ident) => { stringify!($cf) };
}

macro_rules! consts {
    ($($n:ident),* $(,)?) => {{
        let mut c = String::new();
        let mut r = BTreeMap::new();
        $(
            c += &format!("P(\"{0}\", (unsigned long long)({0}));\n", stringify!($n));
            r.insert(stringify!($n).to_string(), $n as u64);
        )*
        (c, r)
    }};
}

#[test]
fn rust_bindings_match_the_installed_headers() {
    let (sc, mut expect) = structs! {
        fi_tx_attr { caps, mode, op_flags, msg_order, comp_order, inject_size, size, iov_limit, rma_iov_limit, tclass }
        fi_rx_attr { caps, mode, op_flags, msg_order, comp_order, total_buffered_recv, size, iov_limit }
        fi_ep_attr { type_ = type, protocol, protocol_version, max_msg_size, msg_prefix_size, max_order_raw_size,
            max_order_war_size, max_order_waw_size, mem_tag_format, tx_ctx_cnt, rx_ctx_cnt, auth_key_size, auth_key }
        fi_domain_attr { domain, name, threading, control_progress, data_progress, resource_mgmt, av_type, mr_mode,
            mr_key_size, cq_data_size, cq_cnt, ep_cnt, tx_ctx_cnt, rx_ctx_cnt, max_ep_tx_ctx, max_ep_rx_ctx,
            max_ep_stx_ctx, max_ep_srx_ctx, cntr_cnt, mr_iov_limit, caps, mode, auth_key, auth_key_size,
            max_err_data, mr_cnt, tclass }
        fi_fabric_attr { fabric, name, prov_name, prov_version, api_version }
        fi_info { next, caps, mode, addr_format, src_addrlen, dest_addrlen, src_addr, dest_addr, handle, tx_attr,
            rx_attr, ep_attr, domain_attr, fabric_attr, nic }
        fi_ops { size, close, bind, control, ops_open, tostr, ops_set }
        fid { fclass, context, ops }
        fi_ops_fabric { size, domain, passive_ep, eq_open, wait_open, trywait, domain2 }
        fid_fabric { fid, ops, api_version }
        fi_ops_domain { size, av_open, cq_open, endpoint, scalable_ep, cntr_open, poll_open, stx_ctx, srx_ctx,
            query_atomic, query_collective, endpoint2 }
        fi_ops_mr { size, reg, regv, regattr }
        fid_domain { fid, ops, mr }
        fid_mr { fid, mem_desc, key }
        fi_mr_attr { mr_iov, iov_count, access, offset, requested_key, context, auth_key_size, auth_key, iface, device }
        fi_rma_iov { addr, len, key }
        fi_msg_rma { msg_iov, desc, iov_count, addr, rma_iov, rma_iov_count, context, data }
        fi_ops_rma { size, read, readv, readmsg, write, writev, writemsg, inject, writedata, injectdata }
        fi_ioc { addr, count }
        fi_rma_ioc { addr, count, key }
        fi_msg_atomic { msg_iov, desc, iov_count, addr, rma_iov, rma_iov_count, datatype, op, context, data }
        fi_atomic_attr { count, size }
        fi_ops_atomic { size, write, writev, writemsg, inject, readwrite, readwritev, readwritemsg, compwrite,
            compwritev, compwritemsg, writevalid, readwritevalid, compwritevalid }
        fi_av_attr { type_ = type, rx_ctx_bits, count, ep_per_node, name, map_addr, flags }
        fi_ops_av { size, insert, insertsvc, insertsym, remove, lookup, straddr, av_set }
        fid_av { fid, ops }
        fi_cq_attr { size, flags, format, wait_obj, signaling_vector, wait_cond, wait_set }
        fi_cq_entry { op_context }
        fi_cq_msg_entry { op_context, flags, len }
        fi_cq_data_entry { op_context, flags, len, buf, data }
        fi_cq_tagged_entry { op_context, flags, len, buf, data, tag }
        fi_cq_err_entry { op_context, flags, len, buf, data, tag, olen, err, prov_errno, err_data, err_data_size }
        fi_ops_cq { size, read, readfrom, readerr, sread, sreadfrom, signal, strerror }
        fid_cq { fid, ops }
        fi_eq_attr { size, flags, wait_obj, signaling_vector, wait_set }
        fi_eq_err_entry { fid, context, data, err, prov_errno, err_data, err_data_size }
        fi_ops_eq { size, read, readerr, write, sread, strerror }
        fid_eq { fid, ops }
        fi_msg { msg_iov, desc, iov_count, addr, context, data }
        fi_msg_tagged { msg_iov, desc, iov_count, addr, tag, ignore, context, data }
        fi_ops_ep { size, cancel, getopt, setopt, tx_ctx, rx_ctx, rx_size_left, tx_size_left }
        fi_ops_cm { size, setname, getname, getpeer, connect, listen, accept, reject, shutdown, join }
        fi_ops_msg { size, recv, recvv, recvmsg, send, sendv, sendmsg, inject, senddata, injectdata }
        fi_ops_tagged { size, recv, recvv, recvmsg, send, sendv, sendmsg, inject, senddata, injectdata }
        fid_ep { fid, ops, cm, msg, rma, tagged, atomic, collective }
        fi_context { internal }
        fi_provider { version, fi_version, context, name, getinfo, fabric, cleanup }
    };
    let (cc_, rc) = consts! {
        FI_MAJOR_VERSION, FI_MINOR_VERSION,
        FI_SUCCESS, FI_EPERM, FI_ENOENT, FI_EINTR, FI_EIO, FI_EBADF, FI_EAGAIN, FI_ENOMEM, FI_EACCES, FI_EFAULT,
        FI_EBUSY, FI_ENODEV, FI_EINVAL, FI_ENOSPC, FI_ENOSYS, FI_ENOMSG, FI_ENODATA, FI_EOVERFLOW, FI_EMSGSIZE,
        FI_ENOPROTOOPT, FI_EOPNOTSUPP, FI_EADDRNOTAVAIL, FI_ECONNRESET, FI_ENOTCONN, FI_ETIMEDOUT,
        FI_EHOSTUNREACH, FI_ECANCELED, FI_EKEYREJECTED, FI_EOTHER, FI_ETOOSMALL, FI_EOPBADSTATE, FI_EAVAIL,
        FI_EBADFLAGS, FI_ENOEQ, FI_EDOMAIN, FI_ENOCQ, FI_ECRC, FI_ETRUNC, FI_ENOKEY, FI_ENOAV, FI_EOVERRUN,
        FI_ENORX,
        FI_MSG, FI_RMA, FI_TAGGED, FI_ATOMIC, FI_MULTICAST, FI_COLLECTIVE, FI_READ, FI_WRITE, FI_RECV, FI_SEND,
        FI_TRANSMIT, FI_REMOTE_READ, FI_REMOTE_WRITE, FI_MULTI_RECV, FI_REMOTE_CQ_DATA, FI_MORE, FI_PEEK,
        FI_TRIGGER, FI_FENCE, FI_PRIORITY, FI_COMPLETION, FI_INJECT, FI_INJECT_COMPLETE, FI_TRANSMIT_COMPLETE,
        FI_DELIVERY_COMPLETE, FI_AFFINITY, FI_COMMIT_COMPLETE, FI_MATCH_COMPLETE, FI_AV_USER_ID, FI_PEER, FI_HMEM,
        FI_VARIABLE_MSG, FI_RMA_PMEM, FI_SOURCE_ERR, FI_LOCAL_COMM, FI_REMOTE_COMM, FI_SHARED_AV,
        FI_PROV_ATTR_ONLY, FI_NUMERICHOST, FI_RMA_EVENT, FI_SOURCE, FI_NAMED_RX_CTX, FI_DIRECTED_RECV, FI_CLAIM,
        FI_DISCARD, FI_SELECTIVE_COMPLETION, FI_SYNC_ERR,
        FI_CONTEXT, FI_MSG_PREFIX, FI_ASYNC_IOV, FI_RX_CQ_DATA, FI_LOCAL_MR, FI_CONTEXT2, FI_BUFFERED_RECV,
        FI_FORMAT_UNSPEC, FI_SOCKADDR, FI_SOCKADDR_IN, FI_ADDR_STR, FI_ADDR_UNSPEC, FI_ADDR_NOTAVAIL,
        FI_AV_UNSPEC, FI_AV_MAP, FI_AV_TABLE,
        FI_MR_UNSPEC, FI_MR_BASIC, FI_MR_SCALABLE, FI_MR_LOCAL, FI_MR_RAW, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED,
        FI_MR_PROV_KEY, FI_MR_MMU_NOTIFY, FI_MR_RMA_EVENT, FI_MR_ENDPOINT, FI_MR_HMEM, FI_MR_COLLECTIVE,
        FI_PROGRESS_UNSPEC, FI_PROGRESS_AUTO, FI_PROGRESS_MANUAL,
        FI_THREAD_UNSPEC, FI_THREAD_SAFE, FI_THREAD_FID, FI_THREAD_DOMAIN, FI_THREAD_COMPLETION, FI_THREAD_ENDPOINT,
        FI_RM_UNSPEC, FI_RM_DISABLED, FI_RM_ENABLED,
        FI_ORDER_NONE, FI_ORDER_SAS, FI_ORDER_STRICT,
        FI_EP_UNSPEC, FI_EP_MSG, FI_EP_DGRAM, FI_EP_RDM, FI_PROTO_UNSPEC,
        FI_CLASS_FABRIC, FI_CLASS_DOMAIN, FI_CLASS_EP, FI_CLASS_AV, FI_CLASS_MR, FI_CLASS_CQ, FI_CLASS_CNTR, FI_CLASS_EQ,
        FI_GETWAIT, FI_ENABLE, FI_GETWAITOBJ,
        FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_SET, FI_WAIT_FD, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD, FI_WAIT_POLLFD,
        FI_CQ_FORMAT_UNSPEC, FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED,
        FI_CQ_COND_NONE, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, FI_PARAM_STRING,
        FI_LOG_WARN, FI_LOG_INFO, FI_LOG_DEBUG, FI_LOG_CORE, FI_LOG_FABRIC, FI_LOG_DOMAIN, FI_LOG_EP_CTRL,
        FI_LOG_EP_DATA, FI_LOG_AV, FI_LOG_CQ,
        FI_INT8, FI_UINT8, FI_INT16, FI_UINT16, FI_INT32, FI_UINT32, FI_INT64, FI_UINT64, FI_FLOAT, FI_DOUBLE,
        FI_FLOAT_COMPLEX, FI_DOUBLE_COMPLEX, FI_LONG_DOUBLE, FI_LONG_DOUBLE_COMPLEX, FI_DATATYPE_LAST,
        FI_INT128, FI_UINT128,
        FI_MIN, FI_MAX, FI_SUM, FI_PROD, FI_LOR, FI_LAND, FI_BOR, FI_BAND, FI_LXOR, FI_BXOR, FI_ATOMIC_READ,
        FI_ATOMIC_WRITE, FI_CSWAP, FI_CSWAP_NE, FI_CSWAP_LE, FI_CSWAP_LT, FI_CSWAP_GE, FI_CSWAP_GT, FI_MSWAP,
        FI_ATOMIC_OP_LAST, FI_FETCH_ATOMIC, FI_COMPARE_ATOMIC,
    };
    expect.extend(rc);
    // A derived constant: the 1.0 error entry ends where err_data_size begins.
    expect.insert(
        "FI_CQ_ERR_ENTRY_1_0_SIZE".into(),
        FI_CQ_ERR_ENTRY_1_0_SIZE as u64,
    );
    let extra =
        "P(\"FI_CQ_ERR_ENTRY_1_0_SIZE\", offsetof(struct fi_cq_err_entry, err_data_size));\n";
    // fi_version() is a Rust fn: compare it with the macro.
    expect.insert("FI_VERSION(1,17)".into(), fi_version(1, 17) as u64);
    let extra2 = "P(\"FI_VERSION(1,17)\", FI_VERSION(1,17));\n";
    // The atomic enums travel as c_int in sys.rs' signatures and fi_msg_atomic.
    for e in ["fi_datatype", "fi_op"] {
        expect.insert(format!("sizeof enum {e}"), size_of::<libc::c_int>() as u64);
    }
    let extra3 = "P(\"sizeof enum fi_datatype\", sizeof(enum fi_datatype));\n\
                  P(\"sizeof enum fi_op\", sizeof(enum fi_op));\n";

    let src = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/fabric.h>\n#include <rdma/fi_domain.h>\n\
         #include <rdma/fi_endpoint.h>\n#include <rdma/fi_tagged.h>\n#include <rdma/fi_cm.h>\n#include <rdma/fi_eq.h>\n\
         #include <rdma/fi_errno.h>\n#include <rdma/fi_rma.h>\n#include <rdma/fi_atomic.h>\n#include <rdma/providers/fi_prov.h>\n#include <rdma/providers/fi_log.h>\n\
         #define P(n, v) printf(\"%s=%llu\\n\", n, (unsigned long long)(v))\nint main(void) {{\n{sc}{cc_}{extra}{extra2}{extra3}return 0;\n}}\n"
    );
    let dir = std::env::temp_dir().join(format!("hx-ofi-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&c, src).unwrap();
    let out = Command::new("cc")
        .arg("-Wall")
        .arg("-Werror")
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let got: BTreeMap<String, u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let mut bad = Vec::new();
    for (k, v) in &expect {
        match got.get(k) {
            Some(g) if g == v => {}
            g => bad.push(format!("{k}: Rust {v}, C {g:?}")),
        }
    }
    assert_eq!(
        got.len(),
        expect.len(),
        "C printed a different set of names"
    );
    assert!(bad.is_empty(), "layout differs:\n{}", bad.join("\n"));
    assert!(expect.len() > 300, "{} items checked", expect.len());
}
