//! Links the coldstart-run wrapper without debug information or a symbol
//! table: it is read cold in front of the program it starts, and the
//! kernel's readahead windows around its first page faults would otherwise
//! read the debug sections that follow its code in the file (measured: 16
//! MiB of a 23 MiB unstripped coldstart-run at read_ahead_kb 8192, against
//! its 0.5 MiB of code). At 8192 KiB the kernel reads the whole file, and
//! the symbol table was a quarter of it (894 KiB with it, 673 KiB without):
//! a panic's backtrace then names no function, which the wrapper, a few
//! hundred lines around the replay, can spare.

fn main() {
    println!("cargo:rustc-link-arg-bin=coldstart-run=-Wl,--strip-all");
    println!("cargo:rerun-if-changed=build.rs");
}
