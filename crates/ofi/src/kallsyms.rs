//! libfabric 1.17 runs the init function of every provider built into it in every process that
//! calls fi_getinfo, whatever `FI_PROVIDER` (or Open MPI's `mtl_ofi_provider_include`) says: the
//! include list only hides a provider after its init ran (src/fabric.c: `fi_ini` calls each
//! `*_INIT` and then `ofi_register_provider`, which applies the filter). Debian's build has the
//! verbs provider built in, and its init (prov/verbs/src/fi_verbs.c, `vrb_os_mem_support`) reads
//! all of `/proc/kallsyms` twice, looking for the peer-memory and dma-buf symbols: ~50 ms of
//! kernel time each on this kernel, 6.4 CPU-s for 64 ranks (35% of all CPU of a 64-rank start on
//! 2 cores; hidden, the slowest MPI_Init went from 6.55 to 2.54 s: BENCHMARKS.md, "64 ranks
//! again").
//!
//! libfabric loads the providers in FI_PROVIDER_PATH (and its provider directory) before it runs
//! the built-in inits (`ofi_load_dl_prov` comes first in `fi_ini`), so `fi_prov_ini` is early
//! enough to answer those reads. When hxcomm is the only provider this process may use
//! (`FI_PROVIDER=hxcomm`, or Open MPI's `OMPI_MCA_mtl_ofi_provider_include=hxcomm` with
//! `FI_PROVIDER` unset), it points libfabric's own `fopen` (its GOT slot, nothing else in the
//! process) at a filter that answers ENOENT for `/proc/kallsyms` and passes every other path on.
//! verbs then takes its "no peer memory, no dma-buf" branch, which matters only to verbs itself,
//! and verbs is filtered out anyway. Nothing is done when the variables name any other provider,
//! on other architectures, or when `HX_FI_KALLSYMS=keep` is set; any step that fails leaves
//! libfabric as it was. The provider library is pinned in memory (RTLD_NODELETE) first, so the
//! filter outlives libfabric's dlclose of it at exit.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Whether the environment makes hxcomm the only provider this process will use.
pub fn exclusive(get: &dyn Fn(&str) -> Option<String>) -> bool {
    let only_hxcomm = |v: &str| v.trim().eq_ignore_ascii_case("hxcomm");
    if get("HX_FI_KALLSYMS").is_some_and(|v| v.trim() == "keep") {
        return false;
    }
    match get("FI_PROVIDER") {
        Some(p) if !p.trim().is_empty() => only_hxcomm(&p),
        _ => get("OMPI_MCA_mtl_ofi_provider_include").is_some_and(|v| only_hxcomm(&v)),
    }
}

/// The real fopen, once libfabric's slot points at [`fopen_filter`].
static REAL_FOPEN: AtomicUsize = AtomicUsize::new(0);

type FopenFn = unsafe extern "C" fn(*const libc::c_char, *const libc::c_char) -> *mut libc::FILE;

unsafe extern "C" fn fopen_filter(
    path: *const libc::c_char,
    mode: *const libc::c_char,
) -> *mut libc::FILE {
    if !path.is_null() && std::ffi::CStr::from_ptr(path).to_bytes() == b"/proc/kallsyms" {
        *libc::__errno_location() = libc::ENOENT;
        return std::ptr::null_mut();
    }
    let real = REAL_FOPEN.load(Ordering::Acquire);
    if real == 0 {
        *libc::__errno_location() = libc::ENOSYS;
        return std::ptr::null_mut();
    }
    // SAFETY: the value libfabric's slot held, libc's fopen.
    let real: FopenFn = std::mem::transmute::<usize, FopenFn>(real);
    real(path, mode)
}

/// Hides /proc/kallsyms from libfabric's built-in providers when hxcomm is the only provider
/// this process uses (see the module's text). Returns whether it did.
pub fn skip_verbs_kallsyms() -> bool {
    if !exclusive(&|k| std::env::var(k).ok()) {
        return false;
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        // SAFETY: reads the dynamic sections of loaded objects as the loader left them.
        unsafe { imp::patch() }
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        false
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod imp {
    use super::{fopen_filter, FopenFn, REAL_FOPEN};
    use libc::{c_int, c_void, size_t};
    use std::sync::atomic::Ordering;

    const DT_NULL: i64 = 0;
    const DT_STRTAB: i64 = 5;
    const DT_SYMTAB: i64 = 6;
    const DT_RELA: i64 = 7;
    const DT_RELASZ: i64 = 8;
    const DT_PLTRELSZ: i64 = 2;
    const DT_JMPREL: i64 = 23;
    const R_X86_64_GLOB_DAT: u32 = 6;
    const R_X86_64_JUMP_SLOT: u32 = 7;

    #[repr(C)]
    struct Dyn {
        tag: i64,
        val: u64,
    }

    #[repr(C)]
    struct Rela {
        offset: u64,
        info: u64,
        addend: i64,
    }

    #[repr(C)]
    struct Sym {
        name: u32,
        info: u8,
        other: u8,
        shndx: u16,
        value: u64,
        size: u64,
    }

    /// libfabric's load address and dynamic section.
    struct Found {
        base: usize,
        dynamic: *const Dyn,
    }

    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: size_t,
        data: *mut c_void,
    ) -> c_int {
        let info = &*info;
        if info.dlpi_name.is_null() {
            return 0;
        }
        let name = std::ffi::CStr::from_ptr(info.dlpi_name).to_bytes();
        let file = name.rsplit(|&c| c == b'/').next().unwrap_or(name);
        if !file.starts_with(b"libfabric.so") {
            return 0;
        }
        for i in 0..info.dlpi_phnum as usize {
            let ph = &*info.dlpi_phdr.add(i);
            if ph.p_type == libc::PT_DYNAMIC {
                let found = &mut *(data as *mut Option<Found>);
                *found = Some(Found {
                    base: info.dlpi_addr as usize,
                    dynamic: (info.dlpi_addr as usize + ph.p_vaddr as usize) as *const Dyn,
                });
                return 1;
            }
        }
        0
    }

    /// The GOT slots of libfabric that hold fopen (its PLT slot, or a data slot if it took the
    /// address).
    unsafe fn fopen_slots(f: &Found) -> Vec<*mut usize> {
        // glibc relocates these pointers in place on x86_64; an unrelocated one is an offset.
        let addr = |v: u64| {
            let v = v as usize;
            if v < f.base {
                f.base + v
            } else {
                v
            }
        };
        let (mut strtab, mut symtab) = (0, 0);
        let mut tables = [(0usize, 0usize); 2];
        let mut d = f.dynamic;
        while (*d).tag != DT_NULL {
            match (*d).tag {
                DT_STRTAB => strtab = addr((*d).val),
                DT_SYMTAB => symtab = addr((*d).val),
                DT_JMPREL => tables[0].0 = addr((*d).val),
                DT_PLTRELSZ => tables[0].1 = (*d).val as usize,
                DT_RELA => tables[1].0 = addr((*d).val),
                DT_RELASZ => tables[1].1 = (*d).val as usize,
                _ => {}
            }
            d = d.add(1);
        }
        let mut out = Vec::new();
        if strtab == 0 || symtab == 0 {
            return out;
        }
        for (start, size) in tables {
            if start == 0 {
                continue;
            }
            for i in 0..size / std::mem::size_of::<Rela>() {
                let r = &*(start as *const Rela).add(i);
                let kind = (r.info & 0xffff_ffff) as u32;
                if kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT {
                    continue;
                }
                let sym = &*(symtab as *const Sym).add((r.info >> 32) as usize);
                let name = std::ffi::CStr::from_ptr((strtab + sym.name as usize) as *const _);
                if matches!(name.to_bytes(), b"fopen" | b"fopen64") {
                    out.push((f.base + r.offset as usize) as *mut usize);
                }
            }
        }
        out
    }

    /// Keeps this library loaded for the life of the process.
    unsafe fn pin_self() -> bool {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(fopen_filter as *const c_void, &mut info) == 0 || info.dli_fname.is_null() {
            return false;
        }
        let h = libc::dlopen(
            info.dli_fname,
            libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        );
        // The extra reference is the pin; it is never closed.
        !h.is_null()
    }

    /// The protection of the mapping that holds `addr`, from /proc/self/maps (read with
    /// open(2), not through the slot being patched).
    pub(super) fn protection(addr: usize) -> Option<c_int> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        maps.lines().find_map(|line| {
            let (range, rest) = line.split_once(' ')?;
            let (lo, hi) = range.split_once('-')?;
            let (lo, hi) = (
                usize::from_str_radix(lo, 16).ok()?,
                usize::from_str_radix(hi, 16).ok()?,
            );
            if !(lo..hi).contains(&addr) {
                return None;
            }
            let perms = rest.as_bytes();
            let mut prot = libc::PROT_NONE;
            for (i, (c, bit)) in [
                (b'r', libc::PROT_READ),
                (b'w', libc::PROT_WRITE),
                (b'x', libc::PROT_EXEC),
            ]
            .into_iter()
            .enumerate()
            {
                if perms.get(i) == Some(&c) {
                    prot |= bit;
                }
            }
            Some(prot)
        })
    }

    pub unsafe fn patch() -> bool {
        let mut found: Option<Found> = None;
        libc::dl_iterate_phdr(Some(each), &mut found as *mut Option<Found> as *mut c_void);
        let Some(f) = found else {
            return false;
        };
        let slots = fopen_slots(&f);
        if slots.is_empty() || !pin_self() {
            return false;
        }
        let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
        let mut done = false;
        for slot in slots {
            let current = slot.read_volatile();
            if current == fopen_filter as FopenFn as usize {
                done = true;
                continue;
            }
            let start = (slot as usize) & !(page - 1);
            let span = (slot as usize + std::mem::size_of::<usize>()).div_ceil(page) * page - start;
            // With full RELRO (Debian) the slot is read-only after relocation: open it for the
            // write, then give it back exactly the protection it had. A lazily bound GOT
            // (partial RELRO) stays writable: the loader still writes to it.
            let Some(prot) = protection(slot as usize) else {
                continue;
            };
            if prot & libc::PROT_WRITE == 0
                && libc::mprotect(start as *mut c_void, span, prot | libc::PROT_WRITE) != 0
            {
                continue;
            }
            REAL_FOPEN.store(current, Ordering::Release);
            slot.write_volatile(fopen_filter as FopenFn as usize);
            if prot & libc::PROT_WRITE == 0 {
                libc::mprotect(start as *mut c_void, span, prot);
            }
            done = true;
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn only_when_hxcomm_is_the_only_provider() {
        assert!(!exclusive(&env(&[])));
        assert!(exclusive(&env(&[("FI_PROVIDER", "hxcomm")])));
        assert!(exclusive(&env(&[("FI_PROVIDER", " HXCOMM ")])));
        assert!(!exclusive(&env(&[("FI_PROVIDER", "hxcomm,tcp")])));
        assert!(!exclusive(&env(&[("FI_PROVIDER", "^verbs")])));
        assert!(exclusive(&env(&[(
            "OMPI_MCA_mtl_ofi_provider_include",
            "hxcomm"
        )])));
        assert!(!exclusive(&env(&[(
            "OMPI_MCA_mtl_ofi_provider_include",
            "hxcomm,psm2"
        )])));
        // FI_PROVIDER, when set, decides.
        assert!(!exclusive(&env(&[
            ("OMPI_MCA_mtl_ofi_provider_include", "hxcomm"),
            ("FI_PROVIDER", "tcp")
        ])));
        assert!(!exclusive(&env(&[
            ("FI_PROVIDER", "hxcomm"),
            ("HX_FI_KALLSYMS", "keep")
        ])));
    }

    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn a_mappings_protection_is_read_from_the_maps() {
        static RO: u8 = 1;
        let mut rw = 0u8;
        let code = the_filter_answers_enoent_for_kallsyms_only as fn() as usize;
        assert_eq!(
            imp::protection(&RO as *const u8 as usize).map(|p| p & libc::PROT_WRITE),
            Some(0)
        );
        assert_eq!(
            imp::protection(&mut rw as *mut u8 as usize),
            Some(libc::PROT_READ | libc::PROT_WRITE)
        );
        assert!(imp::protection(code).is_some_and(|p| p & libc::PROT_EXEC != 0));
        assert_eq!(imp::protection(0), None);
    }

    #[test]
    fn the_filter_answers_enoent_for_kallsyms_only() {
        // Without a patch the filter has no real fopen: it refuses everything but still
        // answers /proc/kallsyms with ENOENT first.
        unsafe {
            let f = fopen_filter(c"/proc/kallsyms".as_ptr(), c"r".as_ptr());
            assert!(f.is_null());
            assert_eq!(*libc::__errno_location(), libc::ENOENT);
            REAL_FOPEN.store(libc::fopen as FopenFn as usize, Ordering::Release);
            let f = fopen_filter(c"/proc/self/status".as_ptr(), c"r".as_ptr());
            assert!(!f.is_null());
            libc::fclose(f);
            assert!(fopen_filter(c"/proc/kallsyms".as_ptr(), c"r".as_ptr()).is_null());
        }
    }
}
