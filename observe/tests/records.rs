//! What the observers write, read back without the tools: the perf map's lines (functions,
//! static functions, stubs), the jitdump's records with source lines from the relocated
//! DWARF, and the GDB symbol file's section addresses.

mod common;

use common::{compile, scratch, Loaded};
use elfjit_observe::{Features, LoadedObject};
use object::{Object, ObjectSection};

const KERNEL: &str = "#line 1 \"records.c\"\n\
extern float expf(float);\n\
__attribute__((noinline)) static float twice(float x) {\n\
    return x * 2.0f;\n\
}\n\
float soft(float x) {\n\
    return expf(twice(x)) + 1.0f;\n\
}\n";

#[test]
fn the_perf_map_names_functions_static_functions_and_stubs() {
    let dir = scratch("records-map");
    let map = dir.join("perf.map");
    elfjit_observe::enable_with(Features::PERF_MAP, &map, &dir).unwrap();
    let loaded = Loaded::new(&compile(KERNEL, "-O2", &[]));
    let text = std::fs::read_to_string(&map).unwrap();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split(' ').nth(2) == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
            .to_string()
    };
    let (start, size) = loaded.range("soft");
    // Other tests of this binary load modules too, while the map is on.
    let own = format!("{start:x} {size:x} soft");
    line("soft");
    assert!(text.lines().any(|l| l == own), "no line {own}:\n{text}");
    line("twice");
    let stub = if cfg!(target_arch = "aarch64") {
        "expf@veneer"
    } else {
        "expf@stub"
    };
    line(stub);
    for l in text.lines() {
        let fields: Vec<&str> = l.split(' ').collect();
        assert_eq!(fields.len(), 3, "{l}");
        assert!(
            u64::from_str_radix(fields[0], 16).is_ok()
                && u64::from_str_radix(fields[1], 16).is_ok(),
            "{l}"
        );
    }
    elfjit_observe::disable(Features::PERF_MAP);
    drop(loaded);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_gdb_symbol_file_puts_each_loaded_section_where_it_went() {
    let object = compile(KERNEL, "-O2", &["-g"]);
    let loaded = Loaded::new(&object);
    let text_address = loaded.range("soft").0;
    let parsed = object::File::parse(&object[..]).unwrap();
    let text = parsed.section_by_name(".text").unwrap();
    let soft = parsed
        .symbols()
        .find(|s| object::ObjectSymbol::name(s) == Ok("soft"))
        .unwrap();
    let text_base = text_address - object::ObjectSymbol::address(&soft);
    let mut addresses = vec![None; parsed.sections().count() + 1];
    addresses[text.index().0] = Some(text_base);
    let symfile = elfjit_observe::symbol_file(
        "records",
        &LoadedObject {
            bytes: &object,
            section_addresses: addresses,
        },
    )
    .unwrap();
    let reparsed = object::File::parse(&symfile[..]).unwrap();
    assert_eq!(
        reparsed.section_by_name(".text").unwrap().address(),
        text_base
    );
    // Unloaded sections stay at 0; the DWARF and its relocations are all there.
    let info = reparsed.section_by_name(".debug_info").unwrap();
    assert_eq!(info.address(), 0);
    assert!(info.relocations().count() > 0);
    assert_eq!(symfile.len(), object.len());
}

/// Reads the jitdump's records: (id, body) pairs after the 40-byte header.
fn records(bytes: &[u8]) -> Vec<(u32, &[u8])> {
    let mut out = Vec::new();
    let mut at = 40;
    while at + 16 <= bytes.len() {
        let id = u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap());
        let size = u32::from_ne_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        out.push((id, &bytes[at + 16..at + size]));
        at += size;
    }
    assert_eq!(at, bytes.len(), "records do not end where the file does");
    out
}

#[test]
fn the_jitdump_has_code_and_source_lines_for_each_function() {
    let dir = scratch("records-jitdump");
    elfjit_observe::enable_with(Features::JITDUMP, &dir.join("unused.map"), &dir).unwrap();
    let loaded = Loaded::new(&compile(KERNEL, "-O2", &["-g"]));
    let path = elfjit_observe::jitdump_path().unwrap();
    assert!(path.starts_with(&dir));
    let bytes = std::fs::read(&path).unwrap();
    let records = records(&bytes);
    let (start, size) = loaded.range("soft");
    let load = records
        .iter()
        .position(|(id, body)| {
            *id == 0 && u64::from_ne_bytes(body[16..24].try_into().unwrap()) == start
        })
        .expect("a JIT_CODE_LOAD for soft");
    let body = records[load].1;
    assert_eq!(u64::from_ne_bytes(body[24..32].try_into().unwrap()), size);
    assert!(body[40..].starts_with(b"soft\0"));
    // SAFETY: `soft` is loaded and its code readable.
    let code = unsafe { std::slice::from_raw_parts(start as usize as *const u8, size as usize) };
    assert!(
        body.ends_with(code),
        "the record's code is not the loaded code"
    );
    // The debug record for the same address comes just before, with lines of records.c
    // from 5 (`float soft(float x) {`) to 7 (its closing brace), 6 (its body) among them.
    let (id, debug) = records[load - 1];
    assert_eq!(id, 2, "no JIT_CODE_DEBUG_INFO before soft's JIT_CODE_LOAD");
    assert_eq!(u64::from_ne_bytes(debug[0..8].try_into().unwrap()), start);
    let count = u64::from_ne_bytes(debug[8..16].try_into().unwrap());
    let mut at = 16;
    let mut lines = Vec::new();
    for _ in 0..count {
        let address = u64::from_ne_bytes(debug[at..at + 8].try_into().unwrap());
        let line = i32::from_ne_bytes(debug[at + 8..at + 12].try_into().unwrap());
        let name_end = at + 16 + debug[at + 16..].iter().position(|&b| b == 0).unwrap();
        let name = std::str::from_utf8(&debug[at + 16..name_end])
            .unwrap()
            .to_string();
        assert!(
            (start..start + size).contains(&address),
            "{address:x} outside soft"
        );
        assert!(name.ends_with("records.c"), "{name}");
        lines.push(line);
        at = name_end + 1;
    }
    assert!(lines.contains(&6), "lines {lines:?}");
    assert!(lines.iter().all(|l| (5..=7).contains(l)), "lines {lines:?}");
    elfjit_observe::disable(Features::JITDUMP);
    drop(loaded);
    std::fs::remove_dir_all(&dir).unwrap();
}
