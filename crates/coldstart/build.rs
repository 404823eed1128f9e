//! Links the coldstart-run wrapper without debug information or a symbol
//! table: it is read cold in front of the program it starts, and the
//! kernel's readahead windows around its first page faults would otherwise
//! read the debug sections that follow its code in the file (measured: 16
//! MiB of a 23 MiB unstripped coldstart-run at read_ahead_kb 8192, against
//! its 0.5 MiB of code). At 8192 KiB the kernel reads the whole file, and
//! the symbol table was a quarter of it (894 KiB with it, 673 KiB without):
//! a panic's backtrace then names no function, which the wrapper, a few
//! hundred lines around the replay, can spare.
//!
//! It also links coldstart-run's unwinder in (libgcc_eh, 24 KiB) instead of
//! loading libgcc_s.so.1 at every start: one shared library fewer for the
//! loader to find, map and read from a cold disk in front of the program
//! (measured: 0.3 ms of the wrapper's 2.0 at read_ahead_kb 128, one major
//! fault fewer). Rust's standard library asks for `-lgcc_s` by name, so a
//! linker script of that name, found first, points it at the static
//! archive. Where the C compiler has no libgcc_eh.a (or for another target
//! than GNU/Linux) the wrapper links libgcc_s as before.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rustc-link-arg-bin=coldstart-run=-Wl,--strip-all");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let native = std::env::var("HOST").ok() == std::env::var("TARGET").ok();
    if target_os == "linux" && target_env == "gnu" && native && has_static_unwinder() {
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        let dir = out.join("static-unwinder");
        std::fs::create_dir_all(&dir).expect("OUT_DIR is writable");
        std::fs::write(dir.join("libgcc_s.so"), "INPUT(-lgcc_eh)\n").expect("OUT_DIR is writable");
        // The linker searches -L directories, wherever they appear, before
        // its default ones, for every -l.
        println!("cargo:rustc-link-arg-bin=coldstart-run=-L{}", dir.display());
        println!("cargo:rustc-link-arg-bin=coldstart-run=-static-libgcc");
    }
}

/// Whether the C compiler that links has the static unwinder: it prints the
/// archive's full path when it has, the bare name otherwise.
fn has_static_unwinder() -> bool {
    let compiler = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    Command::new(compiler)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .is_some_and(|out| {
            let path = String::from_utf8_lossy(&out.stdout);
            let path = path.trim();
            path != "libgcc_eh.a" && std::path::Path::new(path).is_file()
        })
}
