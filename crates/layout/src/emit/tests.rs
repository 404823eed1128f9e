//! Exact text of every emitter for one hand-built order, and the checks
//! each makes without a binary or objects.

use super::*;
use crate::Strategy;

/// A script of the same shape as ld's defaults, written for the tests.
pub(crate) const SCRIPT: &str = "OUTPUT_FORMAT(\"elf64-x86-64\")\nSECTIONS\n{\n  \
    /* .text in a comment */\n  . = SEGMENT_START(\"text-segment\", 0) + SIZEOF_HEADERS;\n  \
    .init : { KEEP (*(SORT_NONE(.init))) }\n  .text :\n  {\n    *(.text .text.*)\n  }\n  \
    .rodata : { *(.rodata .rodata.*) }\n  \
    . = DATA_SEGMENT_RELRO_END (SIZEOF (.data) >= 24 ? 24 : 0, .);\n  .data :\n  {\n    \
    *(.data .data.*)\n  }\n}\n";

fn entry(name: &str, kind: Kind, size: u64) -> OrderEntry {
    OrderEntry {
        raw_name: name.to_string(),
        kind,
        size,
        used_by: 1,
        median_rank: 0,
        calls: None,
    }
}

fn order_of(entries: Vec<OrderEntry>) -> Order {
    Order {
        strategy: Strategy::FirstCall,
        traces: 1,
        entries,
        warnings: Vec::new(),
    }
}

/// Two functions, gcc's cold part of one, a function in an anonymous
/// namespace, and a data object.
fn sample_order() -> Order {
    order_of(vec![
        entry("_Z5startv", Kind::Function, 100),
        entry("helper", Kind::Function, 50),
        entry("helper.cold", Kind::Function, 20),
        entry("_ZN12_GLOBAL__N_16hiddenEv", Kind::Function, 30),
        entry("table", Kind::Data, 64),
    ])
}

fn emit_plain(order: &Order, linker: Linker) -> Emitted {
    emit(order, linker, &EmitContext::default()).expect("emits")
}

fn reasons(report: &EmitReport) -> Vec<(&str, &Reason)> {
    report
        .unordered
        .iter()
        .map(|u| (u.raw_name.as_str(), &u.reason))
        .collect()
}

#[test]
fn lld_lists_every_symbol() {
    let emitted = emit_plain(&sample_order(), Linker::Lld);
    assert_eq!(
        emitted.text,
        "# coldstart order file for lld: -Wl,--symbol-ordering-file=FILE; strategy first-call, \
         5 of 5 traced symbols\n_Z5startv\nhelper\nhelper.cold\n_ZN12_GLOBAL__N_16hiddenEv\ntable\n"
    );
    let report = &emitted.report;
    assert_eq!((report.symbols, report.ordered), (5, 5));
    assert_eq!((report.ordered_bytes, report.traced_bytes), (264, 264));
    assert_eq!(report.coverage(), 1.0);
    assert!(report.unordered.is_empty() && report.caveats.is_empty());
    assert!(report.warnings.is_empty());
    assert_eq!(report.usage, "-Wl,--symbol-ordering-file=FILE");
}

#[test]
fn gold_lists_section_names_and_a_catch_all_per_output_section() {
    let emitted = emit_plain(&sample_order(), Linker::Gold);
    assert_eq!(
        emitted.text,
        "# coldstart order file for gold: -fuse-ld=gold -Wl,--section-ordering-file=FILE; \
         strategy first-call, 5 of 5 traced symbols\n\
         .text.hot._Z5startv\n.text._Z5startv\n.text.startup._Z5startv\n.text.unlikely._Z5startv\n\
         .text.hot.helper\n.text.helper\n.text.startup.helper\n\
         .text.unlikely.helper\n\
         .text.hot._ZN12_GLOBAL__N_16hiddenEv\n.text._ZN12_GLOBAL__N_16hiddenEv\n\
         .text.startup._ZN12_GLOBAL__N_16hiddenEv\n.text.unlikely._ZN12_GLOBAL__N_16hiddenEv\n\
         .rodata.table\n.data.rel.ro.local.table\n.data.rel.ro.table\n.data.rel.local.table\n\
         .data.rel.table\n.data.table\n.bss.table\n\
         .tdata.table\n.tbss.table\n\
         # every other section keeps its input order, after the ones above\n\
         .text*\n.rodata*\n.data*\n.bss*\n.tdata*\n.tbss*\n"
    );
    assert_eq!(emitted.report.ordered, 5);
    assert_eq!(emitted.report.warnings, [sections::GUESS_WARNING]);
}

#[test]
fn bfd_2_43_gets_a_section_ordering_fragment() {
    let target = BfdTarget {
        version: (2, 43),
        default_script: None,
    };
    let context = EmitContext {
        bfd: Some(&target),
        ..EmitContext::default()
    };
    let emitted = emit(&sample_order(), Linker::Bfd, &context).expect("emits");
    assert_eq!(
        emitted.text,
        "/* coldstart order file for bfd: -Wl,--section-ordering-file=FILE; strategy \
         first-call, 5 of 5 traced symbols */\n\
         .text : {\n\
         \x20 *(.text.hot._Z5startv .text._Z5startv .text.startup._Z5startv .text.unlikely._Z5startv)\n\
         \x20 *(.text.hot.helper .text.helper .text.startup.helper)\n\
         \x20 *(.text.unlikely.helper)\n\
         \x20 *(.text.hot._ZN12_GLOBAL__N_16hiddenEv .text._ZN12_GLOBAL__N_16hiddenEv \
         .text.startup._ZN12_GLOBAL__N_16hiddenEv .text.unlikely._ZN12_GLOBAL__N_16hiddenEv)\n\
         }\n\
         .rodata : {\n  *(.rodata.table)\n}\n\
         .data.rel.ro : {\n  *(.data.rel.ro.local.table .data.rel.ro.table)\n}\n\
         .data : {\n  *(.data.rel.local.table .data.rel.table .data.table)\n}\n\
         .bss : {\n  *(.bss.table)\n}\n\
         .tdata : {\n  *(.tdata.table)\n}\n\
         .tbss : {\n  *(.tbss.table)\n}\n"
    );
    assert_eq!(emitted.report.usage, "-Wl,--section-ordering-file=FILE");
}

#[test]
fn older_bfd_gets_its_default_script_with_the_statements_first() {
    let target = BfdTarget {
        version: (2, 40),
        default_script: Some(SCRIPT.to_string()),
    };
    let context = EmitContext {
        bfd: Some(&target),
        ..EmitContext::default()
    };
    let order = order_of(vec![
        entry("b", Kind::Function, 8),
        entry("a", Kind::Function, 8),
        entry("v", Kind::Data, 8),
    ]);
    let emitted = emit(&order, Linker::Bfd, &context).expect("emits");
    let usage = "-Wl,-T,FILE (replaces GNU ld 2.40's default script; made for one kind of \
                 link: probe again for -shared, -pie or other -z options)";
    let begin = "\n    /* coldstart: ordered input sections, first */\n";
    let end = "    /* coldstart: end of ordered input sections */\n";
    let expected = format!(
        "/* coldstart order file for bfd: {usage}; strategy first-call, 3 of 3 traced symbols \
         */\n{}",
        SCRIPT
            .replacen(
                ".text :\n  {",
                &format!(
                    ".text :\n  {{{begin}    *(.text.hot.b .text.b .text.startup.b \
                     .text.unlikely.b)\n    *(.text.hot.a .text.a .text.startup.a \
                     .text.unlikely.a)\n{end}"
                ),
                1
            )
            // The script has no .data.rel.ro, .bss or TLS sections: the
            // guesses for those are left out, the others stay.
            .replacen(
                ".rodata : {",
                &format!(".rodata : {{{begin}    *(.rodata.v)\n{end}"),
                1
            )
            .replacen(
                ".data :\n  {",
                &format!(".data :\n  {{{begin}    *(.data.rel.local.v .data.rel.v .data.v)\n{end}"),
                1
            )
    );
    assert_eq!(emitted.text, expected);
    assert_eq!(emitted.report.usage, usage);
    assert_eq!(emitted.report.ordered, 3);

    // A script with nothing but .text has no place for data.
    let text_only = BfdTarget {
        version: (2, 40),
        default_script: Some("SECTIONS\n{\n  .text : { *(.text .text.*) }\n}\n".to_string()),
    };
    let context = EmitContext {
        bfd: Some(&text_only),
        ..EmitContext::default()
    };
    let emitted = emit(&order, Linker::Bfd, &context).expect("emits");
    assert_eq!(
        reasons(&emitted.report),
        [(
            "v",
            &Reason::NoOutputSection {
                section: ".rodata.v".to_string()
            }
        )]
    );
    assert!(!emitted.text.contains(".v"));
    assert_eq!(emitted.report.ordered, 2);

    let no_script = BfdTarget {
        version: (2, 40),
        default_script: None,
    };
    let context = EmitContext {
        bfd: Some(&no_script),
        ..EmitContext::default()
    };
    let error = emit(&order, Linker::Bfd, &context).expect_err("needs the script");
    assert!(error.to_string().contains("has no --section-ordering-file"));
    let error = emit(&order, Linker::Bfd, &EmitContext::default()).expect_err("needs ld");
    assert!(matches!(error, Error::BfdTargetMissing));
}

#[test]
fn ld64_adds_the_mach_o_underscore() {
    let emitted = emit_plain(&sample_order(), Linker::Ld64);
    assert_eq!(
        emitted.text,
        "# coldstart order file for ld64: -Wl,-order_file,FILE; strategy first-call, 5 of 5 \
         traced symbols\n__Z5startv\n_helper\n_helper.cold\n__ZN12_GLOBAL__N_16hiddenEv\n_table\n"
    );
}

#[test]
fn msvc_keeps_public_functions_with_msvc_names() {
    let emitted = emit_plain(&sample_order(), Linker::Msvc);
    assert_eq!(emitted.text, "helper\nhelper.cold\n");
    assert_eq!(
        reasons(&emitted.report),
        [
            ("_Z5startv", &Reason::ItaniumName),
            ("_ZN12_GLOBAL__N_16hiddenEv", &Reason::AnonymousNamespace),
            ("table", &Reason::DataNotOrderable),
        ]
    );
    assert_eq!(emitted.report.ordered_bytes, 70);

    let long = format!("?{}@@YAXXZ", "x".repeat(4100));
    let order = order_of(vec![
        entry("?start@@YAXXZ", Kind::Function, 10),
        entry("?f@?A0x1b2c3d4e@@YAXXZ", Kind::Function, 10),
        entry(&long, Kind::Function, 10),
        entry("c_func", Kind::Function, 10),
    ]);
    let emitted = emit_plain(&order, Linker::Msvc);
    assert_eq!(emitted.text, "?start@@YAXXZ\nc_func\n");
    assert_eq!(
        reasons(&emitted.report),
        [
            ("?f@?A0x1b2c3d4e@@YAXXZ", &Reason::AnonymousNamespace),
            (long.as_str(), &Reason::NameTooLong { length: 4108 }),
        ]
    );
    assert_eq!(emitted.report.warnings, [msvc::NAMES_WARNING]);
}

#[test]
fn bolt_lists_functions_only() {
    let emitted = emit_plain(&sample_order(), Linker::Bolt);
    assert_eq!(
        emitted.text,
        "_Z5startv\nhelper\nhelper.cold\n_ZN12_GLOBAL__N_16hiddenEv\n"
    );
    assert_eq!(
        reasons(&emitted.report),
        [("table", &Reason::DataNotOrderable)]
    );
    assert_eq!(
        (emitted.report.ordered_bytes, emitted.report.traced_bytes),
        (200, 264)
    );
}

#[test]
fn unnameable_sections_are_refused_with_the_name() {
    let order = order_of(vec![
        entry("ok", Kind::Function, 8),
        entry("odd*name", Kind::Function, 8),
    ]);
    let emitted = emit_plain(&order, Linker::Gold);
    assert!(!emitted.text.contains("odd"));
    assert_eq!(
        reasons(&emitted.report),
        [(
            "odd*name",
            &Reason::Unnameable {
                section: ".text.hot.odd*name".to_string()
            }
        )]
    );
    assert_eq!(emitted.report.ordered, 1);
}

#[test]
fn the_report_reads_as_plain_words_and_serialises() {
    let emitted = emit_plain(&sample_order(), Linker::Bolt);
    let text = emitted.report.to_string();
    assert!(text.starts_with("bolt order file: 4 of 5 symbols, 200 of 264 traced bytes (75.8%)\n"));
    assert!(text.contains("  table (64 bytes): data: this tool orders functions only\n"));
    let json = serde_json::to_value(&emitted.report).expect("serialises");
    assert_eq!(json["unordered"][0]["reason"], "data_not_orderable");
    assert_eq!(json["linker"], "bolt");
}

#[test]
fn linker_names_round_trip() {
    for linker in Linker::ALL {
        assert_eq!(linker.name().parse::<Linker>().ok(), Some(linker));
        assert!(!linker.description().is_empty());
    }
    let error = "mold".parse::<Linker>().expect_err("unknown");
    assert!(
        error
            .to_string()
            .contains("lld, gold, bfd, ld64, msvc, bolt")
    );
}
