//! The Mach-O and Windows emitters, checked by real links with LLVM's
//! ld64.lld and lld-link on small objects clang builds for those targets:
//! the order comes out as written, and the link warns about nothing the
//! emitter kept.

mod common;

use coldstart_layout::emit::{CaveatKind, Reason};
use coldstart_layout::{EmitContext, Kind, Linker, ObjectIndex, emit};
use common::{assert_contiguous, code_symbols, run, skip, stderr, tool, used_in_order};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `source` (named `name`) with clang for `target`.
fn compile(
    clang: &Path,
    dir: &Path,
    name: &str,
    source: &str,
    target: &str,
    flags: &[&str],
) -> PathBuf {
    let input = dir.join(name);
    std::fs::write(&input, source).expect("write source");
    let output = dir.join(format!("{name}.o"));
    run(Command::new(clang)
        .args(["-target", target, "-O1", "-c"])
        .args(flags)
        .arg(&input)
        .arg("-o")
        .arg(&output));
    output
}

const NOINLINE: &str = "__attribute__((noinline))";

#[test]
fn ld64_lld_follows_the_order_file() {
    let (Some(clang), Some(ld64), Some(nm)) = (tool("clang-19"), tool("ld64.lld"), tool("llvm-nm"))
    else {
        return skip(
            "clang-19, ld64.lld or llvm-nm is not installed (apt-get install clang-19 lld-19 llvm-19)",
        );
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let target = "x86_64-apple-macos11";
    // Two objects, each with its own static `s`.
    let a = compile(
        &clang,
        dir.path(),
        "a.c",
        &format!(
            "{NOINLINE} static int s(int x) {{ return x * 7 + 1; }}\n\
         {NOINLINE} int a1(int x) {{ return s(x) + 2; }}\n\
         {NOINLINE} int a2(int x) {{ return x - 3; }}\n"
        ),
        target,
        &[],
    );
    let b = compile(
        &clang,
        dir.path(),
        "b.c",
        &format!(
            "{NOINLINE} static int s(int x) {{ return x * 5 + 4; }}\n\
         {NOINLINE} int b1(int x) {{ return s(x) + 9; }}\n"
        ),
        target,
        &[],
    );
    let objects = ObjectIndex::from_paths(&[&a, &b]).expect("reads Mach-O objects");
    // Names as an ELF trace of the same code spells them.
    let made = used_in_order(["b1", "a2", "s", "a1", "missing"].map(|n| (n, Kind::Function, 16)));
    let context = EmitContext {
        objects: Some(&objects),
        ..EmitContext::default()
    };
    let emitted = emit(&made, Linker::Ld64, &context).expect("emits");
    let report = &emitted.report;
    assert_eq!(report.ordered, 4, "{report}");
    assert_eq!(report.unordered.len(), 1);
    assert_eq!(
        (
            report.unordered[0].raw_name.as_str(),
            &report.unordered[0].reason
        ),
        ("missing", &Reason::NotInObjects)
    );
    assert_eq!(report.caveats.len(), 1);
    assert_eq!(
        report.caveats[0].caveat,
        CaveatKind::SameLocalName { definitions: 2 }
    );

    let link = |order_file: Option<&Path>, out: &Path| {
        let mut command = Command::new(&ld64);
        command
            .args([
                "-arch",
                "x86_64",
                "-platform_version",
                "macos",
                "11.0",
                "11.0",
                "-dylib",
                "-o",
            ])
            .arg(out)
            .arg(&a)
            .arg(&b);
        if let Some(file) = order_file {
            command.arg("-order_file").arg(file);
        }
        run(&mut command)
    };
    let expected: Vec<String> = ["_b1", "_a2", "_s", "_s", "_a1"].map(String::from).to_vec();
    // Without the file the linker keeps input order, which is not ours.
    let plain = dir.path().join("plain.dylib");
    link(None, &plain);
    let symbols = code_symbols(&nm, &plain);
    assert_ne!(
        symbols.iter().map(|(_, n)| n.clone()).collect::<Vec<_>>(),
        expected
    );

    let file = dir.path().join("order.txt");
    std::fs::write(&file, &emitted.text).expect("write order");
    let ordered = dir.path().join("ordered.dylib");
    let output = link(Some(&file), &ordered);
    assert_eq!(stderr(&output), "", "ld64.lld warned");
    let symbols = code_symbols(&nm, &ordered);
    let lowest = symbols.first().map(|(a, _)| *a);
    assert_contiguous(&symbols, &expected, lowest, "ld64.lld");
}

/// Code symbols of a PE image by address, from lld-link's /map, public and
/// static alike.
fn map_symbols(map: &Path) -> Vec<(u64, String)> {
    let text = std::fs::read_to_string(map).expect("read map");
    let mut symbols: Vec<(u64, String)> = text
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (place, name, address) = (fields.first()?, fields.get(1)?, fields.get(2)?);
            // Code is in section 1, .text.
            place.starts_with("0001:").then_some(())?;
            Some((u64::from_str_radix(address, 16).ok()?, name.to_string()))
        })
        .collect();
    symbols.sort();
    symbols
}

#[test]
fn lld_link_follows_the_order_file_for_public_comdat_functions() {
    let (Some(clang), Some(lld_link)) = (tool("clang-19"), tool("lld-link")) else {
        return skip("clang-19 or lld-link is not installed (apt-get install clang-19 lld-19)");
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let target = "x86_64-pc-windows-msvc";
    // -ffunction-sections is clang's /Gy: a COMDAT per function.
    let c = compile(
        &clang,
        dir.path(),
        "w.c",
        &format!(
            "{NOINLINE} static int c_static(int x) {{ return x * 7 + 1; }}\n\
         {NOINLINE} int uses_static(int x) {{ return c_static(x) + 2; }}\n\
         {NOINLINE} int c_global(int x) {{ return x - 3; }}\n"
        ),
        target,
        &["-ffunction-sections"],
    );
    let cpp = compile(
        &clang,
        dir.path(),
        "w2.cpp",
        &format!(
            "namespace {{ {NOINLINE} int anon(int x) {{ return x * 3; }} }}\n\
         {NOINLINE} int cpp_func(int x) {{ return x + 11; }}\n\
         {NOINLINE} int calls_anon(int x) {{ return anon(x) + 1; }}\n"
        ),
        target,
        &["-ffunction-sections"],
    );
    let plain = compile(
        &clang,
        dir.path(),
        "wn.c",
        &format!("{NOINLINE} int plain_func(int x) {{ return x ^ 5; }}\n"),
        target,
        &[],
    );
    let objects = ObjectIndex::from_paths(&[&c, &cpp, &plain]).expect("reads COFF objects");
    // The anonymous namespace's decorated name carries a per-file hash.
    let Some(nm) = tool("llvm-nm") else {
        return skip("llvm-nm is not installed (apt-get install llvm-19)");
    };
    let listed = run(Command::new(&nm).arg(&cpp));
    let anon_name = String::from_utf8_lossy(&listed.stdout)
        .split_whitespace()
        .find(|word| word.starts_with("?anon@?A0x"))
        .map(str::to_string)
        .expect("the anonymous function's name");
    let traced = [
        "uses_static",
        "?cpp_func@@YAHH@Z",
        "c_static",
        "plain_func",
        "c_global",
        anon_name.as_str(),
        "?calls_anon@@YAHH@Z",
    ];
    let made = used_in_order(traced.map(|n| (n, Kind::Function, 16)));
    let context = EmitContext {
        objects: Some(&objects),
        ..EmitContext::default()
    };
    let emitted = emit(&made, Linker::Msvc, &context).expect("emits");
    assert_eq!(
        emitted.text,
        "uses_static\n?cpp_func@@YAHH@Z\nc_global\n?calls_anon@@YAHH@Z\n"
    );
    let reasons: Vec<(&str, &Reason)> = emitted
        .report
        .unordered
        .iter()
        .map(|u| (u.raw_name.as_str(), &u.reason))
        .collect();
    assert_eq!(reasons[0], ("c_static", &Reason::Static));
    assert!(matches!(
        reasons[1],
        ("plain_func", Reason::NotComdat { .. })
    ));
    assert_eq!(
        reasons[2],
        (anon_name.as_str(), &Reason::AnonymousNamespace)
    );

    let link = |text: &str, name: &str| {
        let file = dir.path().join(format!("{name}.txt"));
        std::fs::write(&file, text).expect("write order");
        let map = dir.path().join(format!("{name}.map"));
        let output = run(Command::new(&lld_link)
            .args(["/dll", "/noentry", "/nodefaultlib", "/opt:noref"])
            .arg(format!(
                "/out:{}",
                dir.path().join(format!("{name}.dll")).display()
            ))
            .arg(format!("/map:{}", map.display()))
            .args([&c, &cpp, &plain])
            .arg(format!("/order:@{}", file.display())));
        (stderr(&output), map_symbols(&map))
    };
    let (warnings, symbols) = link(&emitted.text, "ordered");
    assert_eq!(warnings, "", "lld-link warned");
    // What MSVC documents for /ORDER: only COMDAT functions move, named as
    // the linker knows them (decorated for C++); statics and the anonymous
    // namespace have no public name. So of the trace, in trace order:
    let expected: Vec<String> = [
        "uses_static",
        "?cpp_func@@YAHH@Z",
        "c_global",
        "?calls_anon@@YAHH@Z",
    ]
    .map(String::from)
    .to_vec();
    let lowest = symbols.first().map(|(a, _)| *a);
    assert_contiguous(&symbols, &expected, lowest, "lld-link");

    // The control: without the objects the emitter cannot see that
    // plain_func is no COMDAT, keeps it, and lld-link warns.
    let blind = emit(&made, Linker::Msvc, &EmitContext::default()).expect("emits");
    assert!(blind.text.contains("plain_func"));
    let (warnings, _) = link(&blind.text, "blind");
    assert!(
        warnings.contains("missing symbol: plain_func"),
        "{warnings}"
    );
}
