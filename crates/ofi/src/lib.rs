//! hxcomm as a libfabric provider. libfabric dlopens `libhxcomm_fi.so` from FI_PROVIDER_PATH and
//! calls [`fi_prov_ini`]; everything else is reached through the ops tables of the objects.
//!
//! Every `extern "C"` function is a few pointer checks and one call into Rust under
//! `util::guard`, so a panic becomes -FI_EOTHER instead of unwinding into C.

mod av;
pub mod backend;
mod cq;
mod domain;
#[cfg_attr(test, allow(dead_code))] // unit tests of this crate run on the mock
mod engine_backend;
mod ep;
mod eq;
mod fabric;
pub mod hints;
pub mod info;
pub mod kallsyms;
pub mod mock;
pub mod mr;
pub mod settings;
pub mod sys;
mod util;

use std::ffi::CString;
use std::sync::atomic::Ordering;
use sys::*;
use util::{guard, log, opt_cstr};

/// Written by libfabric (its `context`), hence a writable static.
static mut PROVIDER: fi_provider = fi_provider {
    version: hints::PROV_VERSION,
    fi_version: fi_version(FI_MAJOR_VERSION, FI_MINOR_VERSION),
    context: fi_context {
        internal: [std::ptr::null_mut(); 4],
    },
    name: c"hxcomm".as_ptr(),
    getinfo: Some(hx_getinfo),
    fabric: Some(fabric::hx_fabric),
    cleanup: Some(hx_cleanup),
};

pub(crate) fn provider() -> *mut fi_provider {
    &raw mut PROVIDER
}

/// The entry point libfabric looks up in every `*fi.so` it loads.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi_provider {
    guard(std::ptr::null_mut(), || {
        // Before libfabric runs its built-in providers' inits (see kallsyms.rs).
        let hidden = kallsyms::skip_verbs_kallsyms();
        for (name, meaning) in settings::settings() {
            let (Ok(n), Ok(h)) = (
                CString::new(name.as_str()),
                CString::new(settings::help(&name, &meaning)),
            ) else {
                continue;
            };
            // fi_param_define copies both strings; "%s" keeps '%' in help texts literal.
            // SAFETY: valid NUL-terminated strings and our provider struct.
            unsafe {
                fi_param_define(
                    provider(),
                    n.as_ptr(),
                    FI_PARAM_STRING,
                    c"%s".as_ptr(),
                    h.as_ptr(),
                )
            };
        }
        util::LOADED.store(true, Ordering::Relaxed);
        if hidden {
            log(
                FI_LOG_INFO,
                FI_LOG_CORE,
                "hxcomm is the only provider: /proc/kallsyms hidden from libfabric's built-in \
                 providers' inits (HX_FI_KALLSYMS=keep shows it)",
            );
        }
        provider()
    })
}

unsafe extern "C" fn hx_cleanup() {}

unsafe extern "C" fn hx_getinfo(
    version: u32,
    node: *const libc::c_char,
    service: *const libc::c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> libc::c_int {
    if info.is_null() {
        return -FI_EINVAL;
    }
    guard(-FI_EOTHER, || {
        match getinfo(
            version,
            opt_cstr(node).as_deref(),
            opt_cstr(service).as_deref(),
            flags,
            hints,
        ) {
            Ok(p) => {
                *info = p;
                0
            }
            Err(e) => -e,
        }
    })
}

/// # Safety
/// `hints` is NULL or a valid fi_info.
pub unsafe fn getinfo(
    version: u32,
    node: Option<&str>,
    service: Option<&str>,
    flags: u64,
    hints: *const fi_info,
) -> Result<*mut fi_info, i32> {
    let h = info::from_c(hints);
    let mut offer = hints::select(version, h.as_ref()).map_err(|why| {
        log(
            FI_LOG_INFO,
            FI_LOG_CORE,
            &format!("hxcomm cannot satisfy the hints: {why}"),
        );
        FI_ENODATA
    })?;
    match hints::addressing(node, service, flags) {
        hints::Addressing::None => {
            // No address is known before an endpoint exists; a listen request for "anywhere"
            // stands in for it (so src_addrlen is set, and fi_endpoint treats it as no-op).
            if offer.src_addr.is_none() {
                offer.src_addr = hints::encode_listen(None, None).ok();
            }
        }
        hints::Addressing::Listen { node, service } => {
            let l = hints::encode_listen(node.as_deref(), service.as_deref()).map_err(|why| {
                log(FI_LOG_INFO, FI_LOG_CORE, &why);
                FI_ENODATA
            })?;
            offer.src_addr = Some(l);
        }
        hints::Addressing::Resolve { node, service } => {
            // The client side of node/service: ask a backend who listens there.
            let auth_key = h
                .as_ref()
                .and_then(|h| h.domain.as_ref())
                .and_then(|d| d.auth_key.clone());
            let name = backend::resolve(&node, &service, auth_key).map_err(|why| {
                log(
                    FI_LOG_INFO,
                    FI_LOG_CORE,
                    &format!("hxcomm: {node}:{service}: {why}"),
                );
                FI_ENODATA
            })?;
            offer.dest_addr = Some(name.to_vec());
        }
    }
    info::to_c(&offer)
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe fn close(f: *mut fid) -> i32 {
        ((*(*f).ops).close.unwrap())(f)
    }

    /// fabtests' default: the server asks with FI_SOURCE (node NULL, service), its endpoint
    /// listens there; the client's fi_getinfo(node, service) returns that endpoint's name.
    #[test]
    fn server_listens_and_client_resolves() {
        let v = fi_version(1, 17);
        unsafe {
            let si = getinfo(v, None, Some("hx-test-9228"), FI_SOURCE, std::ptr::null()).unwrap();
            let src = std::slice::from_raw_parts((*si).src_addr as *const u8, (*si).src_addrlen);
            assert_eq!(
                hints::decode_listen(src),
                Some((None, Some("hx-test-9228".into())))
            );
            (*(*si).fabric_attr).api_version = v;
            let mut fab = std::ptr::null_mut();
            assert_eq!(
                fabric::hx_fabric((*si).fabric_attr, &mut fab, std::ptr::null_mut()),
                0
            );
            let mut dom = std::ptr::null_mut();
            assert_eq!(
                domain::hx_domain(fab, si, &mut dom, std::ptr::null_mut()),
                0
            );
            let mut ep = std::ptr::null_mut();
            assert_eq!(ep::hx_endpoint(dom, si, &mut ep, std::ptr::null_mut()), 0);
            let mut name = [0u8; 64];
            let mut len = 64usize;
            let getname = (*(*ep).cm).getname.unwrap();
            assert_eq!(
                getname(&mut (*ep).fid, name.as_mut_ptr() as *mut _, &mut len),
                0
            );

            let ci = getinfo(
                v,
                Some("somehost"),
                Some("hx-test-9228"),
                0,
                std::ptr::null(),
            )
            .unwrap();
            let dest = std::slice::from_raw_parts((*ci).dest_addr as *const u8, (*ci).dest_addrlen);
            assert_eq!(dest, &name[..]);
            assert_eq!(
                getinfo(
                    v,
                    Some("somehost"),
                    Some("hx-test-nobody"),
                    0,
                    std::ptr::null()
                )
                .unwrap_err(),
                FI_ENODATA
            );
            // A second listener at the same place is refused at fi_endpoint.
            let mut ep2 = std::ptr::null_mut();
            assert_ne!(ep::hx_endpoint(dom, si, &mut ep2, std::ptr::null_mut()), 0);

            assert_eq!(close(&mut (*dom).fid), -FI_EBUSY);
            assert_eq!(close(&mut (*ep).fid), 0);
            assert_eq!(close(&mut (*dom).fid), 0);
            assert_eq!(close(&mut (*fab).fid), 0);
            info::free_c(si);
            info::free_c(ci);
        }
    }

    #[test]
    fn getinfo_refuses_with_enodata() {
        let h = hints::Info {
            ep: Some(hints::Ep {
                ep_type: FI_EP_MSG,
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = info::to_c(&h).unwrap();
        unsafe {
            assert_eq!(
                getinfo(fi_version(1, 17), None, None, 0, p).unwrap_err(),
                FI_ENODATA
            );
            info::free_c(p);
            let ok = getinfo(fi_version(1, 17), None, None, 0, std::ptr::null()).unwrap();
            assert!((*(*ok).fabric_attr).prov_name.is_null());
            info::free_c(ok);
        }
    }
}
