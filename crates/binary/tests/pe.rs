//! PE inspection against images built here with object's PE writer, so
//! every expected count comes from the fixture description, not from the
//! code under test; plus x86_64-w64-mingw32-objdump as an outside oracle
//! when it is installed, and truncated or corrupted images.

mod common;

use coldstart_binary::{Error, Format, InspectOptions, Kind, image_overlaps, inspect_bytes};
use object::pe;
use object::write::pe::{NtHeaders, Writer};
use std::path::Path;
use std::process::Command;

const PAGE: u64 = 4096;
const SECTION_ALIGNMENT: u32 = 0x1000;
const FILE_ALIGNMENT: u32 = 0x200;
/// Spec sizes: DOS header, the writer's fixed stub, PE signature, COFF file
/// header, optional header (PE32+ / PE32) with 16 data directories, one
/// section header.
const DOS_HEADER: u64 = 64;
const DOS_STUB: u64 = 64;
const PE_SIGNATURE: u64 = 4;
const COFF_HEADER: u64 = 20;
const OPTIONAL_HEADER_64: u64 = 112 + 16 * 8;
const OPTIONAL_HEADER_32: u64 = 96 + 16 * 8;
const SECTION_HEADER: u64 = 40;

/// What to put in a fixture image.
#[derive(Clone)]
struct Spec {
    is_64: bool,
    image_base: u64,
    dll: bool,
    dynamic_base: bool,
    relocs_stripped: bool,
    /// Offsets inside .data that get a pointer-sized base relocation.
    data_relocs: Vec<u32>,
    data_size: u32,
    import: Option<(&'static str, &'static str)>,
    codeview: Option<([u8; 16], u32)>,
    /// Offsets inside .text that TLS callbacks point at.
    tls_callbacks: Vec<u32>,
    certificate: Option<u32>,
}

impl Spec {
    fn dll64(image_base: u64) -> Spec {
        Spec {
            is_64: true,
            image_base,
            dll: true,
            dynamic_base: true,
            relocs_stripped: false,
            data_relocs: Vec::new(),
            data_size: 0x1000,
            import: None,
            codeview: None,
            tls_callbacks: Vec::new(),
            certificate: None,
        }
    }

    fn ptr(&self) -> u32 {
        if self.is_64 { 8 } else { 4 }
    }

    fn has_rdata(&self) -> bool {
        self.codeview.is_some() || !self.tls_callbacks.is_empty()
    }

    fn section_count(&self) -> u16 {
        2 + u16::from(self.has_rdata())
            + u16::from(self.import.is_some())
            + u16::from(!self.data_relocs.is_empty())
    }

    fn headers_end(&self) -> u64 {
        let optional = if self.is_64 {
            OPTIONAL_HEADER_64
        } else {
            OPTIONAL_HEADER_32
        };
        DOS_HEADER
            + DOS_STUB
            + PE_SIGNATURE
            + COFF_HEADER
            + optional
            + SECTION_HEADER * u64::from(self.section_count())
    }
}

fn put_u16(buf: &mut [u8], at: usize, value: u16) {
    buf[at..at + 2].copy_from_slice(&value.to_le_bytes());
}
fn put_u32(buf: &mut [u8], at: usize, value: u32) {
    buf[at..at + 4].copy_from_slice(&value.to_le_bytes());
}
fn put_ptr(buf: &mut [u8], at: usize, value: u64, is_64: bool) {
    if is_64 {
        buf[at..at + 8].copy_from_slice(&value.to_le_bytes());
    } else {
        put_u32(buf, at, value as u32);
    }
}

/// Builds the image `spec` describes.
fn build(spec: &Spec) -> Vec<u8> {
    let ptr = spec.ptr() as usize;
    let mut out = Vec::new();
    let mut writer = Writer::new(spec.is_64, SECTION_ALIGNMENT, FILE_ALIGNMENT, &mut out);
    writer.reserve_dos_header_and_stub();
    writer.reserve_nt_headers(16);
    writer.reserve_section_headers(spec.section_count());

    let text = writer.reserve_text_section(0x200);
    let mut text_data = vec![0xccu8; 0x200];
    text_data[0] = 0xc3;

    // .rdata: debug directory, CodeView record, TLS directory, callbacks.
    let cv_len = 4 + 16 + 4 + b"fixture.pdb\0".len();
    let tls_dir_at = 64usize;
    let tls_dir_len = if spec.is_64 { 40 } else { 24 };
    let callbacks_at = tls_dir_at + tls_dir_len;
    let rdata_len = callbacks_at + (spec.tls_callbacks.len() + 1) * ptr;
    let rdata = spec
        .has_rdata()
        .then(|| writer.reserve_rdata_section(rdata_len as u32));

    let data = writer.reserve_data_section(spec.data_size, spec.data_size);

    // .idata: descriptors, lookup table, address table, hint/name, DLL name.
    let idata_layout = spec.import.map(|(dll, func)| {
        let ilt = 40usize;
        let iat = ilt + 2 * ptr;
        let hint_name = iat + 2 * ptr;
        let dll_name = (hint_name + 2 + func.len() + 1 + 1) & !1;
        let len = dll_name + dll.len() + 1;
        (ilt, iat, hint_name, dll_name, len)
    });
    let idata = idata_layout.map(|layout| writer.reserve_idata_section(layout.4 as u32));

    for &offset in &spec.data_relocs {
        let typ = if spec.is_64 {
            pe::IMAGE_REL_BASED_DIR64
        } else {
            pe::IMAGE_REL_BASED_HIGHLOW
        };
        writer.add_reloc(data.virtual_address + offset, typ);
    }
    if writer.has_relocs() {
        writer.reserve_reloc_section();
    }
    if let Some(size) = spec.certificate {
        writer.reserve_certificate_table(size);
    }

    let mut rdata_data = vec![0u8; rdata_len];
    if let Some(rdata) = rdata {
        if let Some((guid, age)) = spec.codeview {
            let cv_at = 28usize;
            // IMAGE_DEBUG_DIRECTORY
            put_u32(&mut rdata_data, 12, pe::IMAGE_DEBUG_TYPE_CODEVIEW.0);
            put_u32(&mut rdata_data, 16, cv_len as u32);
            put_u32(&mut rdata_data, 20, rdata.virtual_address + cv_at as u32);
            put_u32(&mut rdata_data, 24, rdata.file_offset + cv_at as u32);
            rdata_data[cv_at..cv_at + 4].copy_from_slice(b"RSDS");
            rdata_data[cv_at + 4..cv_at + 20].copy_from_slice(&guid);
            put_u32(&mut rdata_data, cv_at + 20, age);
            rdata_data[cv_at + 24..cv_at + 24 + 11].copy_from_slice(b"fixture.pdb");
            writer.set_data_directory(pe::IMAGE_DIRECTORY_ENTRY_DEBUG, rdata.virtual_address, 28);
        }
        if !spec.tls_callbacks.is_empty() {
            let callbacks_va =
                spec.image_base + u64::from(rdata.virtual_address) + callbacks_at as u64;
            // AddressOfCallBacks is the fourth pointer-sized field.
            put_ptr(
                &mut rdata_data,
                tls_dir_at + 3 * ptr,
                callbacks_va,
                spec.is_64,
            );
            for (i, &offset) in spec.tls_callbacks.iter().enumerate() {
                let target = spec.image_base + u64::from(text.virtual_address + offset);
                put_ptr(&mut rdata_data, callbacks_at + i * ptr, target, spec.is_64);
            }
            writer.set_data_directory(
                pe::IMAGE_DIRECTORY_ENTRY_TLS,
                rdata.virtual_address + tls_dir_at as u32,
                tls_dir_len as u32,
            );
        }
    }

    let mut idata_data = Vec::new();
    if let (Some((dll, func)), Some((ilt, iat, hint_name, dll_name, len)), Some(idata)) =
        (spec.import, idata_layout, idata)
    {
        idata_data = vec![0u8; len];
        let va = idata.virtual_address;
        put_u32(&mut idata_data, 0, va + ilt as u32);
        put_u32(&mut idata_data, 12, va + dll_name as u32);
        put_u32(&mut idata_data, 16, va + iat as u32);
        put_ptr(
            &mut idata_data,
            ilt,
            u64::from(va) + hint_name as u64,
            spec.is_64,
        );
        put_ptr(
            &mut idata_data,
            iat,
            u64::from(va) + hint_name as u64,
            spec.is_64,
        );
        put_u16(&mut idata_data, hint_name, 0);
        idata_data[hint_name + 2..hint_name + 2 + func.len()].copy_from_slice(func.as_bytes());
        idata_data[dll_name..dll_name + dll.len()].copy_from_slice(dll.as_bytes());
    }

    let mut characteristics = pe::IMAGE_FILE_EXECUTABLE_IMAGE;
    characteristics |= if spec.is_64 {
        pe::IMAGE_FILE_LARGE_ADDRESS_AWARE
    } else {
        pe::IMAGE_FILE_32BIT_MACHINE
    };
    if spec.dll {
        characteristics |= pe::IMAGE_FILE_DLL;
    }
    if spec.relocs_stripped {
        characteristics |= pe::IMAGE_FILE_RELOCS_STRIPPED;
    }
    let mut dll_characteristics = pe::IMAGE_DLLCHARACTERISTICS_NX_COMPAT;
    if spec.dynamic_base {
        dll_characteristics |= pe::IMAGE_DLLCHARACTERISTICS_DYNAMIC_BASE;
        if spec.is_64 {
            dll_characteristics |= pe::IMAGE_DLLCHARACTERISTICS_HIGH_ENTROPY_VA;
        }
    }

    writer.write_dos_header_and_stub().unwrap();
    writer.write_nt_headers(NtHeaders {
        machine: if spec.is_64 {
            pe::IMAGE_FILE_MACHINE_AMD64
        } else {
            pe::IMAGE_FILE_MACHINE_I386
        },
        time_date_stamp: 0,
        characteristics,
        major_linker_version: 14,
        minor_linker_version: 0,
        address_of_entry_point: text.virtual_address,
        image_base: spec.image_base,
        major_operating_system_version: 6,
        minor_operating_system_version: 0,
        major_image_version: 0,
        minor_image_version: 0,
        major_subsystem_version: 6,
        minor_subsystem_version: 0,
        subsystem: pe::IMAGE_SUBSYSTEM_WINDOWS_CUI,
        dll_characteristics,
        size_of_stack_reserve: 0x100000,
        size_of_stack_commit: 0x1000,
        size_of_heap_reserve: 0x100000,
        size_of_heap_commit: 0x1000,
    });
    writer.write_section_headers();
    writer.write_section(text.file_offset, &text_data);
    if let Some(rdata) = rdata {
        writer.write_section(rdata.file_offset, &rdata_data);
    }
    writer.write_section(data.file_offset, &vec![0x11u8; spec.data_size as usize]);
    if let Some(idata) = idata {
        writer.write_section(idata.file_offset, &idata_data);
    }
    writer.write_reloc_section();
    if let Some(size) = spec.certificate {
        writer.write_certificate_table(&vec![0x5au8; size as usize]);
    }
    out
}

/// Ten DIR64 fixups over three distinct pages of a four-page .data
/// (pages 0, 1 and 3; page 2 untouched): 3 + 4 + 3.
fn main_spec() -> Spec {
    Spec {
        data_relocs: vec![
            0x10, 0x18, 0x20, // page 0
            0x1008, 0x1100, 0x1200, 0x1ff8, // page 1
            0x3000, 0x3008, 0x3010, // page 3
        ],
        data_size: 0x4000,
        import: Some(("KERNEL32.dll", "ExitProcess")),
        codeview: Some((
            [
                0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
                0xee, 0xff,
            ],
            0x2a,
        )),
        tls_callbacks: vec![0x10, 0x20],
        certificate: Some(0x100),
        ..Spec::dll64(0x1_8000_0000)
    }
}

#[test]
fn dll_header_and_details_match_the_fixture() {
    let spec = main_spec();
    let bytes = build(&spec);
    let got = common::inspect_named("main.dll", &bytes);
    assert_eq!(got.format, Format::Pe);
    assert_eq!(got.size, bytes.len() as u64);
    assert_eq!(got.header.kind, Kind::SharedObject);
    assert_eq!(got.header.machine, "x86_64");
    assert_eq!(got.header.bits, 64);
    assert_eq!(got.header.endian, "little");
    // .text is the first section, at RVA 0x1000.
    assert_eq!(got.header.entry, 0x1_8000_1000);
    // GUID fields 00112233-4455-6677-8899aabbccddeeff, age 0x2a.
    assert_eq!(
        got.header.build_id.as_deref(),
        Some("00112233445566778899AABBCCDDEEFF2A")
    );
    assert!(got.header.debug_info);
    assert!(got.header.stripped);
    assert_eq!(got.header.symbols, 0);
    assert_eq!(got.header.interpreter, None);
    assert!(got.segments.is_empty());

    let pe = got.pe.as_ref().expect("PE details");
    assert_eq!(pe.image_base, 0x1_8000_0000);
    // Headers page + .text + .rdata + 4 pages of .data + .idata + .reloc.
    assert_eq!(pe.image_size, 9 * 0x1000);
    assert!(pe.dynamic_base);
    assert!(pe.high_entropy_va);
    assert!(!pe.relocs_stripped);
    assert_eq!(pe.imports, vec!["KERNEL32.dll".to_string()]);
    assert!(got.warnings.is_empty(), "{:?}", got.warnings);

    assert_eq!(got.init_array.count, 2);
    let targets: Vec<Option<u64>> = got.init_array.entries.iter().map(|e| e.target).collect();
    assert_eq!(targets, vec![Some(0x1_8000_1010), Some(0x1_8000_1020)]);
    assert_eq!(got.init_array.code_pages, 1);
}

#[test]
fn dll_sections_and_regions_account_for_every_byte() {
    let spec = main_spec();
    let bytes = build(&spec);
    let got = common::inspect_named("main.dll", &bytes);

    let layout: Vec<(&str, &str, &str, u64, u64, u64, u64)> = got
        .sections
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.kind.as_str(),
                s.flags.as_str(),
                s.offset,
                s.file_size,
                s.address,
                s.memory_size,
            )
        })
        .collect();
    let base = 0x1_8000_0000u64;
    // File layout: headers padded to 0x400, then each section's data padded
    // to the 0x200 file alignment; RVAs step by the 0x1000 section alignment.
    assert_eq!(
        layout,
        vec![
            (".text", "code", "R-X", 0x400, 0x200, base + 0x1000, 0x200),
            (".rdata", "data", "R--", 0x600, 0x200, base + 0x2000, 0x80),
            (".data", "data", "RW-", 0x800, 0x4000, base + 0x3000, 0x4000),
            (".idata", "data", "RW-", 0x4800, 0x200, base + 0x7000, 99),
            (".reloc", "data", "R--", 0x4a00, 0x200, base + 0x8000, 48),
        ]
    );
    let data = &got.sections[2];
    assert_eq!(
        data.pages, 5,
        ".data spans file pages 0..=4 from offset 0x800"
    );
    assert!(got.sections.iter().all(|s| s.segment.is_none()));

    let headers_end = spec.headers_end();
    let regions: Vec<(&str, u64, u64)> = got
        .regions
        .iter()
        .map(|r| (r.label.as_str(), r.offset, r.size))
        .collect();
    assert_eq!(
        regions,
        vec![
            ("[headers]", 0, headers_end),
            ("[padding]", headers_end, 0x400 - headers_end),
            ("[certificate table]", 0x4c00, 0x100),
        ]
    );
    assert_eq!(bytes.len(), 0x4d00);
    assert_eq!(common::accounted(&got), got.size);
}

#[test]
fn dll_base_relocations_match_the_fixture() {
    let bytes = build(&main_spec());
    let got = common::inspect_named("main.dll", &bytes);
    let relocs = &got.relocations;
    assert_eq!(relocs.total, 10);
    assert_eq!(relocs.relative, 10);
    assert_eq!(relocs.symbolic, 0);
    // Padding ABSOLUTE entries (one per odd-sized block) are not fixups.
    assert_eq!(relocs.by_type.len(), 1);
    assert_eq!(relocs.by_type.get("IMAGE_REL_BASED_DIR64"), Some(&10));
    // Three blocks of 4 entries (3+pad, 4, 3+pad): 8 + 4 * 2 bytes each.
    assert_eq!(relocs.bytes, 48);
    assert_eq!(relocs.sections.len(), 1);
    let table = &relocs.sections[0];
    assert_eq!(table.name, ".reloc");
    assert_eq!(table.format, "pe_base");
    assert_eq!(table.offset, 0x4a00);
    assert_eq!(table.size, 48);
    assert_eq!(table.entries, 3);
    assert_eq!(table.relocations, 10);
    assert!(table.dynamic);
    assert_eq!(relocs.pages_written.total, 3);
    assert_eq!(relocs.pages_written.by_section.len(), 1);
    let data = &relocs.pages_written.by_section[0];
    assert_eq!(
        (data.section.as_str(), data.relocations, data.pages),
        (".data", 10, 3)
    );
    assert!(relocs.relr_offsets.is_empty());
    assert!(relocs.relr_estimate.is_none());
}

#[test]
fn page_size_option_changes_page_counts() {
    let bytes = build(&main_spec());
    let options = InspectOptions { page_size: 0x10000 };
    let got = inspect_bytes(Path::new("main.dll"), &bytes, &options).unwrap();
    assert_eq!(got.page_size, 0x10000);
    // All of .data (RVA 0x3000..0x7000) lies in one 64K page.
    assert_eq!(got.relocations.pages_written.total, 1);
}

#[test]
fn exe_without_dynamic_base_warns() {
    let spec = Spec {
        dll: false,
        dynamic_base: false,
        relocs_stripped: true,
        ..Spec::dll64(0x1_4000_0000)
    };
    let got = common::inspect_named("fixed.exe", &build(&spec));
    assert_eq!(got.header.kind, Kind::Executable);
    let pe = got.pe.as_ref().unwrap();
    assert!(!pe.dynamic_base && !pe.high_entropy_va && pe.relocs_stripped);
    let codes: Vec<&str> = got.warnings.iter().map(|w| w.code).collect();
    assert_eq!(codes, vec!["pe-no-dynamic-base", "pe-relocs-stripped"]);
    assert!(got.warnings[0].message.contains("/DYNAMICBASE"));
    assert_eq!(got.relocations.total, 0);
    assert!(got.relocations.sections.is_empty());
    assert_eq!(got.header.build_id, None);
    assert!(!got.header.debug_info);
    assert!(got.pe.as_ref().unwrap().imports.is_empty());
    assert_eq!(common::accounted(&got), got.size);
}

#[test]
fn exe_with_dynamic_base_is_pie() {
    let spec = Spec {
        dll: false,
        ..Spec::dll64(0x1_4000_0000)
    };
    let got = common::inspect_named("aslr.exe", &build(&spec));
    assert_eq!(got.header.kind, Kind::Pie);
    assert!(got.warnings.is_empty());
}

#[test]
fn pe32_highlow_relocations() {
    let spec = Spec {
        is_64: false,
        data_relocs: vec![0x0, 0x4, 0xffc, 0x1000],
        data_size: 0x2000,
        import: Some(("USER32.dll", "MessageBoxA")),
        tls_callbacks: vec![0x40],
        ..Spec::dll64(0x1000_0000)
    };
    let bytes = build(&spec);
    let got = common::inspect_named("small32.dll", &bytes);
    assert_eq!(got.header.machine, "i386");
    assert_eq!(got.header.bits, 32);
    assert_eq!(got.pe.as_ref().unwrap().image_base, 0x1000_0000);
    assert!(!got.pe.as_ref().unwrap().high_entropy_va);
    assert_eq!(got.pe.as_ref().unwrap().imports, vec!["USER32.dll"]);
    assert_eq!(got.relocations.total, 4);
    assert_eq!(
        got.relocations.by_type.get("IMAGE_REL_BASED_HIGHLOW"),
        Some(&4)
    );
    assert_eq!(got.relocations.pages_written.total, 2);
    assert_eq!(got.init_array.count, 1);
    assert_eq!(got.init_array.entries[0].target, Some(0x1000_1040));
    let headers = &got.regions[0];
    assert_eq!(
        (headers.label.as_str(), headers.size),
        ("[headers]", spec.headers_end())
    );
    assert_eq!(common::accounted(&got), got.size);
}

#[test]
fn overlapping_preferred_ranges_are_reported_once() {
    let a = build(&Spec::dll64(0x1_8000_0000));
    let b = build(&Spec::dll64(0x1_8000_2000));
    let c = build(&Spec::dll64(0x2_0000_0000));
    let a = common::inspect_named("a.dll", &a);
    let b = common::inspect_named("b.dll", &b);
    let c = common::inspect_named("c.dll", &c);
    // Headers + .text + .data = 3 pages each.
    assert_eq!(a.pe.as_ref().unwrap().image_size, 0x3000);
    let overlaps = image_overlaps(&[a, b, c]);
    assert_eq!(overlaps.len(), 1);
    let overlap = &overlaps[0];
    assert_eq!(
        (overlap.first.as_str(), overlap.second.as_str()),
        ("a.dll", "b.dll")
    );
    assert_eq!(overlap.first_range, [0x1_8000_0000, 0x1_8000_3000]);
    assert_eq!(overlap.second_range, [0x1_8000_2000, 0x1_8000_5000]);
}

#[test]
fn adjacent_ranges_and_non_pe_files_do_not_overlap() {
    let a = common::inspect_named("a.dll", &build(&Spec::dll64(0x1_8000_0000)));
    let b = common::inspect_named("b.dll", &build(&Spec::dll64(0x1_8000_3000)));
    let mut not_pe = a.clone();
    not_pe.path = "not-pe".to_string();
    not_pe.format = Format::Macho;
    assert!(image_overlaps(&[a.clone(), b, not_pe]).is_empty());
    assert!(image_overlaps(&[a.clone(), a]).is_empty());
}

#[test]
fn executables_only_overlap_with_dlls() {
    let exe = |base| Spec {
        dll: false,
        ..Spec::dll64(base)
    };
    let one = common::inspect_named("one.exe", &build(&exe(0x1_4000_0000)));
    let two = common::inspect_named("two.exe", &build(&exe(0x1_4000_0000)));
    let dll = common::inspect_named("lib.dll", &build(&Spec::dll64(0x1_4000_1000)));
    // Two programs never share an address space; a DLL loads into both.
    let overlaps = image_overlaps(&[one, two, dll]);
    let pairs: Vec<(&str, &str)> = overlaps
        .iter()
        .map(|o| (o.first.as_str(), o.second.as_str()))
        .collect();
    assert_eq!(pairs, vec![("one.exe", "lib.dll"), ("two.exe", "lib.dll")]);
}

fn expect_malformed(name: &str, bytes: &[u8]) -> String {
    match inspect_bytes(Path::new(name), bytes, &InspectOptions::default()) {
        Err(err @ Error::Malformed { format: "PE", .. }) => {
            let message = err.to_string();
            assert!(message.contains(name), "{message}");
            message
        }
        other => panic!("{name}: expected a malformed-PE error, got {other:?}"),
    }
}

/// Offset of the .reloc block headers inside main_spec's image.
const RELOC_OFFSET: usize = 0x4a00;

#[test]
fn corrupt_base_relocation_blocks_are_errors() {
    let good = build(&main_spec());

    let mut small = good.clone();
    small[RELOC_OFFSET + 4..RELOC_OFFSET + 8].copy_from_slice(&4u32.to_le_bytes());
    assert!(expect_malformed("small-block.dll", &small).contains("smaller than"));

    let mut zero = good.clone();
    zero[RELOC_OFFSET + 4..RELOC_OFFSET + 8].copy_from_slice(&0u32.to_le_bytes());
    assert!(expect_malformed("zero-block.dll", &zero).contains("smaller than"));

    let mut long = good.clone();
    long[RELOC_OFFSET + 4..RELOC_OFFSET + 8].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    assert!(expect_malformed("long-block.dll", &long).contains("left"));
}

#[test]
fn truncated_images_are_errors_that_name_the_file() {
    let good = build(&main_spec());
    // Below the optional header the format cannot be recognised as PE at
    // all (lib.rs detection); from there on it must be a malformed PE.
    let recognisable = (DOS_HEADER + DOS_STUB + PE_SIGNATURE + COFF_HEADER + 224) as usize;
    let mut lengths: Vec<usize> = (0..good.len()).step_by(97).collect();
    lengths.extend([
        recognisable,
        spec_boundary(),
        0x400,
        0x4a00,
        0x4a08,
        0x4c00,
        good.len() - 1,
    ]);
    for len in lengths {
        let name = format!("cut-{len}.dll");
        let result = inspect_bytes(Path::new(&name), &good[..len], &InspectOptions::default());
        match result {
            Err(err @ Error::Malformed { format: "PE", .. }) => {
                assert!(err.to_string().contains(&name), "{err}")
            }
            Err(Error::UnknownFormat { .. }) if len < recognisable => {}
            other => panic!("{name}: expected an error, got {other:?}"),
        }
    }
}

fn spec_boundary() -> usize {
    main_spec().headers_end() as usize - 1
}

#[test]
fn corrupted_images_never_panic() {
    let good = build(&main_spec());
    // A fixed-seed xorshift picks bytes to overwrite, so failures reproduce.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..3000 {
        let mut bytes = good.clone();
        for _ in 0..1 + round % 4 {
            // Bias towards the headers and .reloc where the structure lives.
            let at = match next() % 3 {
                0 => (next() % 0x400) as usize,
                1 => RELOC_OFFSET + (next() % 0x40) as usize,
                _ => (next() % bytes.len() as u64) as usize,
            };
            bytes[at] = next() as u8;
        }
        let name = format!("mutant-{round}.dll");
        if let Err(err) = inspect_bytes(Path::new(&name), &bytes, &InspectOptions::default()) {
            assert!(err.to_string().contains(&name), "{err}");
        }
    }
}

/// x86_64-w64-mingw32-objdump -p prints the DLL characteristics, the import
/// directory and every base relocation block; compare counts with it.
#[test]
fn counts_agree_with_mingw_objdump() {
    let objdump = "x86_64-w64-mingw32-objdump";
    if Command::new(objdump).arg("--version").output().is_err() {
        return common::skip(&format!(
            "{objdump} not installed (apt-get install binutils-mingw-w64-x86-64)"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("oracle.dll");
    let bytes = build(&main_spec());
    std::fs::write(&path, &bytes).unwrap();
    let output = Command::new(objdump).arg("-p").arg(&path).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);

    let got = inspect_bytes(&path, &bytes, &InspectOptions::default()).unwrap();
    let pe = got.pe.as_ref().unwrap();

    let field = |name: &str| -> u64 {
        let line = text
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in objdump output"));
        let value = line.split_whitespace().nth(1).unwrap();
        u64::from_str_radix(value, 16).unwrap()
    };
    assert_eq!(field("ImageBase"), pe.image_base);
    assert_eq!(field("SizeOfImage"), pe.image_size);
    let dll_characteristics = field("DllCharacteristics");
    assert_eq!(dll_characteristics & 0x0040 != 0, pe.dynamic_base);
    assert_eq!(dll_characteristics & 0x0020 != 0, pe.high_entropy_va);
    assert_eq!(
        text.contains("\tDLL\n"),
        got.header.kind == Kind::SharedObject
    );

    // "(format RSDS signature <guid> age <decimal> pdb <name>)"
    let codeview = text
        .lines()
        .find_map(|line| line.strip_prefix("(format RSDS signature "))
        .expect("objdump shows the CodeView record");
    let mut words = codeview.split_whitespace();
    let signature = words.next().unwrap().to_ascii_uppercase();
    let age: u32 = words.nth(1).unwrap().parse().unwrap();
    assert_eq!(
        got.header.build_id.as_deref(),
        Some(format!("{signature}{age:X}").as_str())
    );

    let dll_names: Vec<String> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("DLL Name: "))
        .map(str::to_string)
        .collect();
    assert_eq!(dll_names, pe.imports);

    let blocks = text
        .lines()
        .filter(|line| line.trim_start().starts_with("Virtual Address:"))
        .count() as u64;
    let fixup_lines: Vec<&str> = text
        .lines()
        .filter(|line| line.trim_start().starts_with("reloc "))
        .collect();
    let absolute = fixup_lines
        .iter()
        .filter(|l| l.ends_with("ABSOLUTE"))
        .count();
    let dir64 = fixup_lines.iter().filter(|l| l.ends_with("DIR64")).count() as u64;
    assert_eq!(blocks, got.relocations.sections[0].entries);
    assert_eq!((fixup_lines.len() - absolute) as u64, got.relocations.total);
    assert_eq!(
        Some(&dir64),
        got.relocations.by_type.get("IMAGE_REL_BASED_DIR64")
    );
    // objdump prints each fixup's RVA in brackets: distinct 4K pages.
    let pages: std::collections::BTreeSet<u64> = fixup_lines
        .iter()
        .filter(|l| !l.ends_with("ABSOLUTE"))
        .filter_map(|l| {
            let start = l.find('[')? + 1;
            let end = l.find(']')?;
            u64::from_str_radix(l.get(start..end)?.trim(), 16).ok()
        })
        .map(|rva| rva / PAGE)
        .collect();
    assert_eq!(pages.len() as u64, got.relocations.pages_written.total);
}
