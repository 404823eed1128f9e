//! Builds the LD_AUDIT module behind `--no-read-around` (audit/*.c) with the
//! system C compiler, so coldstart-run can carry its bytes and install it at
//! run time. Without a C compiler (or on an architecture the module has no
//! syscall convention for) the bytes are empty and the flag says so.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "audit/no_read_around.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let module = out.join("no_read_around.so");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    let target = std::env::var("TARGET").unwrap_or_default();
    let supported = target_os == "linux" && matches!(target_arch.as_str(), "x86_64" | "aarch64");
    // The system compiler builds for the host; a cross build would need the
    // target's, so it goes without the module rather than embed a wrong one.
    let built = supported && host == target && compile(source, &module);
    if !built {
        println!(
            "cargo:warning=the --no-read-around audit module was not built (needs a C compiler, Linux on x86_64 or aarch64, and no cross build)"
        );
        std::fs::write(&module, b"").expect("OUT_DIR is writable");
    }
}

/// A freestanding shared object: no libc, no start files, nothing undefined.
fn compile(source: &str, module: &std::path::Path) -> bool {
    let compiler = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let status = Command::new(compiler)
        .args([
            "-O2",
            "-fPIC",
            "-shared",
            "-nostdlib",
            "-ffreestanding",
            "-fno-builtin",
            "-fno-stack-protector",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wl,--no-undefined",
            "-Wl,-z,noexecstack",
            "-Wl,--build-id=none",
            "-Wl,-soname,coldstart-no-read-around.so",
            "-o",
        ])
        .arg(module)
        .arg(source)
        .status();
    matches!(status, Ok(status) if status.success())
}
