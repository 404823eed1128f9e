//! The object index on objects and archives gcc and ar build here, and
//! what the section-based emitters make of it: exact section names,
//! functions without a section of their own refused, same-named statics
//! flagged.

mod common;

use coldstart_binary::SymbolBinding;
use coldstart_layout::emit::{CaveatKind, Reason};
use coldstart_layout::{EmitContext, Kind, Linker, ObjectIndex, emit};
use common::{run, skip, tool, used_in_order};
use std::path::{Path, PathBuf};
use std::process::Command;

fn gcc(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let input = dir.join(name);
    std::fs::write(&input, source).expect("write source");
    let output = dir.join(format!("{name}.o"));
    run(Command::new("gcc")
        .args(["-O1", "-c"])
        .args(flags)
        .arg(&input)
        .arg("-o")
        .arg(&output));
    output
}

const SPLIT: [&str; 2] = ["-ffunction-sections", "-fdata-sections"];

/// shared.c without -ffunction-sections; own.c and own2.c with it, own.c
/// inside an archive.
struct Built {
    _dir: tempfile::TempDir,
    shared: PathBuf,
    archive: PathBuf,
    own2: PathBuf,
}

fn built() -> Option<Built> {
    if tool("gcc").is_none() || tool("ar").is_none() {
        skip("gcc or ar is not installed (apt-get install gcc binutils)");
        return None;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let shared = gcc(
        dir.path(),
        "shared.c",
        "int f_shared1(int x) { return x + 1; }\nint f_shared2(int x) { return x * 2; }\n",
        &[],
    );
    let own = gcc(
        dir.path(),
        "own.c",
        "__attribute__((noinline)) static int dup(int x) { return x - 1; }\n\
         int f_own(int x) { return dup(x) * 3; }\n\
         const int own_table[4] = {1, 2, 3, 4};\nint own_counter = 5;\nint own_zero;\n",
        &SPLIT,
    );
    let own2 = gcc(
        dir.path(),
        "own2.c",
        "__attribute__((noinline)) static int dup(int x) { return x + 7; }\n\
         int f_own2(int x) { return dup(x); }\n",
        &SPLIT,
    );
    let archive = dir.path().join("libown.a");
    run(Command::new("ar").arg("rcs").arg(&archive).arg(&own));
    Some(Built {
        _dir: dir,
        shared,
        archive,
        own2,
    })
}

#[test]
fn definitions_name_their_object_section_and_neighbours() {
    let Some(b) = built() else { return };
    let index = ObjectIndex::from_paths(&[&b.shared, &b.archive, &b.own2]).expect("reads");
    assert_eq!(index.objects(), 3);

    let own = index.definitions("f_own");
    assert_eq!(own.len(), 1);
    assert_eq!(own[0].object, format!("{}(own.c.o)", b.archive.display()));
    assert_eq!(own[0].section, ".text.f_own");
    assert_eq!(own[0].neighbours, 0);
    assert_eq!(own[0].binding, SymbolBinding::Global);
    assert_eq!(own[0].kind, Kind::Function);
    assert_eq!(own[0].comdat, None);

    let shared = index.definitions("f_shared1");
    assert_eq!(shared[0].section, ".text");
    assert_eq!(shared[0].neighbours, 1);

    let dup = index.definitions("dup");
    assert_eq!(dup.len(), 2);
    assert!(
        dup.iter()
            .all(|d| d.binding == SymbolBinding::Local && d.section == ".text.dup")
    );

    let sections: Vec<&str> = ["own_table", "own_counter", "own_zero"]
        .iter()
        .map(|n| index.definitions(n)[0].section.as_str())
        .collect();
    assert_eq!(
        sections,
        [".rodata.own_table", ".data.own_counter", ".bss.own_zero"]
    );
    assert!(index.definitions("nowhere").is_empty());
}

#[test]
fn gold_uses_exact_sections_and_refuses_shared_ones() {
    let Some(b) = built() else { return };
    let index = ObjectIndex::from_paths(&[&b.shared, &b.archive, &b.own2]).expect("reads");
    let made = used_in_order([
        ("f_own", Kind::Function, 10),
        ("f_shared1", Kind::Function, 10),
        ("dup", Kind::Function, 10),
        ("nowhere", Kind::Function, 10),
        ("own_table", Kind::Data, 10),
        ("own_zero", Kind::Data, 10),
    ]);
    let context = EmitContext {
        objects: Some(&index),
        ..EmitContext::default()
    };
    let emitted = emit(&made, Linker::Gold, &context).expect("emits");
    assert_eq!(
        emitted.text,
        "# coldstart order file for gold: -fuse-ld=gold -Wl,--section-ordering-file=FILE; \
         strategy first-call, 4 of 6 traced symbols\n\
         .text.f_own\n.text.dup\n.rodata.own_table\n.bss.own_zero\n\
         # every other section keeps its input order, after the ones above\n\
         .text*\n.rodata*\n.bss*\n"
    );
    let report = &emitted.report;
    assert!(report.warnings.is_empty(), "{report}");
    assert_eq!(
        report.unordered[0].reason,
        Reason::SharedSection {
            object: b.shared.display().to_string(),
            section: ".text".to_string(),
            neighbours: 1,
        }
    );
    assert_eq!(report.unordered[1].reason, Reason::NotInObjects);
    assert_eq!(report.caveats.len(), 1);
    assert_eq!(report.caveats[0].raw_name, "dup");
    assert_eq!(
        report.caveats[0].caveat,
        CaveatKind::SameLocalName { definitions: 2 }
    );
    assert!(
        report
            .to_string()
            .contains("compile with -ffunction-sections -fdata-sections")
    );
    assert_eq!((report.ordered_bytes, report.traced_bytes), (40, 60));

    // lld moves whole sections too: the same symbols are left out.
    let lld = emit(&made, Linker::Lld, &context).expect("emits");
    assert!(
        lld.text.ends_with("\nf_own\ndup\nown_table\nown_zero\n"),
        "{}",
        lld.text
    );
    assert_eq!(lld.report.unordered, report.unordered);
}

#[test]
fn outputs_and_other_files_are_refused_with_the_reason() {
    let Some(b) = built() else { return };
    let dir = b.shared.parent().expect("dir").to_path_buf();
    let linked = dir.join("a.out");
    run(Command::new("gcc")
        .arg("-shared")
        .arg("-o")
        .arg(&linked)
        .arg(&b.shared));
    let error = ObjectIndex::from_paths(&[&linked]).expect_err("not relocatable");
    assert!(
        error.to_string().contains("not a relocatable object"),
        "{error}"
    );
    let text = dir.join("notes.txt");
    std::fs::write(&text, "just words\n").expect("write");
    let error = ObjectIndex::from_paths(&[&text]).expect_err("not an object");
    assert!(
        error.to_string().contains("not an object file or archive"),
        "{error}"
    );
    let error = ObjectIndex::from_paths(&[dir.join("missing.o")]).expect_err("missing");
    assert!(error.to_string().contains("missing.o"), "{error}");
}
