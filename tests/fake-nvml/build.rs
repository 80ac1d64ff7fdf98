//! Marks the library as never unloaded (`-z nodelete`): a client may drop its NVML handle
//! (dlclose) while another of its threads is still blocked inside a hung call here, and that
//! thread must have code to return to.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
