//! W^X: with several modules loaded (and used), no mapping of the process is both
//! writable and executable, each module's code is in an r-x mapping, its writable data
//! in a non-executable rw mapping and its constants in a non-writable one.
//!
//! A single test on purpose: it inspects the whole process, so nothing else in this
//! binary may load modules concurrently.

use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::{Arch, Module};
use elfjit_tests::kernel_source;

#[derive(Debug)]
struct Mapping {
    start: usize,
    end: usize,
    perms: String,
    line: String,
}

fn mappings() -> Vec<Mapping> {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .lines()
        .map(|line| {
            let mut parts = line.split_whitespace();
            let range = parts.next().unwrap();
            let perms = parts.next().unwrap().to_string();
            let (a, b) = range.split_once('-').unwrap();
            Mapping {
                start: usize::from_str_radix(a, 16).unwrap(),
                end: usize::from_str_radix(b, 16).unwrap(),
                perms,
                line: line.to_string(),
            }
        })
        .collect()
}

fn mapping_of(maps: &[Mapping], addr: *const u8) -> &Mapping {
    let a = addr as usize;
    maps.iter()
        .find(|m| m.start <= a && a < m.end)
        .unwrap_or_else(|| panic!("{a:#x} is in no mapping"))
}

/// A kernel with a global function, global writable data and a global constant, so
/// every kind of memory has a symbol to look up.
const KINDS: &[u8] = b"
int wx_counter = 41;
const int wx_table[64] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
int wx_bump(void) { return ++wx_counter + wx_table[wx_counter & 7]; }
";

#[test]
fn no_mapping_is_writable_and_executable() {
    let host = Arch::host().expect("supported host");
    let compiler = Compiler::find().expect("clang");
    let mut modules: Vec<(String, Module)> = Vec::new();
    for file in [
        "elementwise_sqrt_fma.c",
        "string_table.c",
        "data_bss_state.c",
        "crc32_lut.c",
        "int128_div.c",
        "ir_globals_i64.ll",
        "ir_sigmoid_expf.ll",
    ] {
        let lang = if file.ends_with(".ll") {
            Lang::Ir
        } else {
            Lang::C
        };
        let obj = compiler
            .compile(&kernel_source(file), &CompileOptions::new(lang, host))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let m = Module::load(&obj).unwrap_or_else(|e| panic!("{file}: {e}"));
        modules.push((file.to_string(), m));
    }
    let obj = compiler
        .compile(KINDS, &CompileOptions::new(Lang::C, host))
        .expect("compile");
    let kinds = Module::load(&obj).expect("load");

    // Use the writable data while everything is mapped: it must really be writable.
    let bump = kinds.symbol("wx_bump").expect("wx_bump");
    // SAFETY: wx_bump is `int (void)`, linked for this host, and `kinds` is alive.
    let bump: extern "C" fn() -> i32 = unsafe { std::mem::transmute(bump) };
    assert_eq!(bump(), 42 + 3); // wx_counter = 42, wx_table[2] = 3
    assert_eq!(bump(), 43 + 4);

    let maps = mappings();
    let wx: Vec<&str> = maps
        .iter()
        .filter(|m| m.perms.contains('w') && m.perms.contains('x'))
        .map(|m| m.line.as_str())
        .collect();
    assert!(
        wx.is_empty(),
        "writable+executable mappings:\n{}",
        wx.join("\n")
    );

    for (file, m) in &modules {
        for f in m.functions() {
            let addr = m
                .symbol(f)
                .unwrap_or_else(|| panic!("{file}: no address for {f}"));
            let map = mapping_of(&maps, addr);
            assert!(
                map.perms.starts_with("r-x"),
                "{file}: {f} at {addr:p} is in `{}`, not r-x",
                map.line
            );
        }
        let (start, len) = m.region();
        assert!(len > 0, "{file}: empty region");
        assert!(
            maps.iter().any(|mp| mp.start <= start && start < mp.end),
            "{file}: region {start:#x} not mapped"
        );
    }

    let code = mapping_of(&maps, kinds.symbol("wx_bump").unwrap());
    assert!(code.perms.starts_with("r-x"), "code in `{}`", code.line);
    let data = mapping_of(&maps, kinds.symbol("wx_counter").expect("wx_counter"));
    assert!(
        data.perms.starts_with("rw-"),
        "writable data in `{}`, expected rw- (not executable)",
        data.line
    );
    let table = mapping_of(&maps, kinds.symbol("wx_table").expect("wx_table"));
    assert!(
        table.perms.starts_with('r') && !table.perms.contains('w'),
        "constant data in `{}`, expected read-only",
        table.line
    );
}
