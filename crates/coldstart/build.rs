//! Links the coldstart-run wrapper without debug information: it is read
//! cold in front of the program it starts, and the kernel's readahead
//! windows around its first page faults would otherwise read the debug
//! sections that follow its code in the file (measured: 16 MiB of a 23 MiB
//! unstripped coldstart-run at read_ahead_kb 8192, against its 0.5 MiB of
//! code).

fn main() {
    println!("cargo:rustc-link-arg-bin=coldstart-run=-Wl,--strip-debug");
    println!("cargo:rerun-if-changed=build.rs");
}
