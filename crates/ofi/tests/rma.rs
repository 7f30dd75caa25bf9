//! tests/c/rma.c: fi_read, fi_write, fi_writedata and atomics between two processes through
//! libfabric over the hxcomm engine, the accesses a target must refuse, and endpoints without
//! FI_RMA.

mod common;

#[test]
fn remote_memory_access_and_atomics() {
    let dir = common::provider_dir();
    let exe = common::compile_c(&dir, "rma");
    for transports in ["tcp", "shm,tcp"] {
        let (ok, out) = common::run_c_env(
            &exe,
            &dir,
            &[],
            &"5a".repeat(32),
            &[("HX_TRANSPORTS", transports)],
        );
        assert!(ok, "HX_TRANSPORTS={transports}:\n{out}");
        assert!(out.contains("target ok") && out.contains("rma ok"), "{out}");
        assert!(out.contains("refusals ok"), "{out}");
        assert!(out.contains("writedata ok"), "{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
