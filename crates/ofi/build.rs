//! Link the plugin with -z nodelete: libfabric dlclose()s providers at exit, and a Rust library
//! that registered thread-local destructors (std, tracing) must stay mapped until they have run,
//! or the process crashes in _dl_fini after main returns.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
