//! Error cases through the library: every bad input is an `Err` with a useful message,
//! never a panic, never a silently wrong load.
//!
//! Corruptions patch real bytes of a real clang object; its layout is read with the
//! small ELF64 reader below (deliberately independent of the loader's own parser).

use elfjit::args::{ArgSpec, RetType};
use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::run::RunRequest;
use elfjit::{Arch, CompileError, Error, Module};
use elfjit_emulate::run;
use elfjit_tests::{kernel_source, request};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn host() -> Arch {
    Arch::host().expect("supported host")
}

fn compile(source: &[u8], lang: Lang, target: Arch) -> Vec<u8> {
    let compiler = Compiler::find().expect("clang");
    compiler
        .compile(source, &CompileOptions::new(lang, target))
        .unwrap_or_else(|e| panic!("compiling the test kernel: {e}"))
}

/// A kernel with .text and .rela.text, .rodata strings, .data.rel.ro pointers, local
/// calls: plenty of structure to damage.
fn sample_object() -> Vec<u8> {
    compile(&kernel_source("string_table.c"), Lang::C, host())
}

/// `Module::load` must return an error (not panic, not succeed). Returns a description
/// of what went wrong instead, or the error text.
fn load_must_fail(what: &str, bytes: &[u8]) -> Result<String, String> {
    let loaded = catch_unwind(AssertUnwindSafe(|| {
        Module::load(bytes).map_err(|e| (e.to_string(), format!("{e:?}")))
    }));
    match loaded {
        Ok(Err((text, debug))) => {
            eprintln!("{what}: {text}");
            if text.trim().is_empty() {
                Err(format!("{what}: error with an empty message ({debug})"))
            } else {
                Ok(text)
            }
        }
        Ok(Ok(m)) => Err(format!(
            "{what}: loaded without error (functions: {:?})",
            m.functions()
        )),
        Err(_) => Err(format!("{what}: Module::load panicked")),
    }
}

// ---------------------------------------------------------------------------------------
// A tiny ELF64 little-endian reader/patcher
// ---------------------------------------------------------------------------------------

fn rd16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
fn rd32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn rd64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
fn wr16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_le_bytes());
}
fn wr32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
fn wr64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

const SHT_SYMTAB: u32 = 2;
const SHT_RELA: u32 = 4;

/// One section header, with the file offset of the header itself (for patching).
#[derive(Clone, Debug)]
struct Section {
    header_at: usize,
    name: String,
    ty: u32,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    entsize: u64,
}

// Offsets of fields inside a section header.
const SH_OFFSET: usize = 24;
const SH_SIZE: usize = 32;
const SH_LINK: usize = 40;
const SH_INFO: usize = 44;
const SH_ENTSIZE: usize = 56;

struct Layout {
    shoff: usize,
    shentsize: usize,
    sections: Vec<Section>,
}

impl Layout {
    fn parse(b: &[u8]) -> Layout {
        assert_eq!(&b[..4], b"\x7fELF");
        assert_eq!(b[4], 2, "ELFCLASS64");
        assert_eq!(b[5], 1, "little-endian");
        assert_eq!(rd16(b, 16), 1, "ET_REL");
        let shoff = rd64(b, 40) as usize;
        let shentsize = rd16(b, 58) as usize;
        let shnum = rd16(b, 60) as usize;
        let shstrndx = rd16(b, 62) as usize;
        assert_eq!(shentsize, 64);
        let mut sections: Vec<Section> = (0..shnum)
            .map(|i| {
                let h = shoff + i * shentsize;
                Section {
                    header_at: h,
                    name: String::new(),
                    ty: rd32(b, h + 4),
                    offset: rd64(b, h + SH_OFFSET),
                    size: rd64(b, h + SH_SIZE),
                    link: rd32(b, h + SH_LINK),
                    info: rd32(b, h + SH_INFO),
                    entsize: rd64(b, h + SH_ENTSIZE),
                }
            })
            .collect();
        let strtab = sections[shstrndx].offset as usize;
        for s in &mut sections {
            let start = strtab + rd32(b, s.header_at) as usize;
            let end = start + b[start..].iter().position(|&c| c == 0).unwrap();
            s.name = String::from_utf8_lossy(&b[start..end]).into_owned();
        }
        Layout {
            shoff,
            shentsize,
            sections,
        }
    }

    fn by_name(&self, name: &str) -> &Section {
        self.sections
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no section {name}"))
    }

    fn symtab(&self) -> &Section {
        self.sections.iter().find(|s| s.ty == SHT_SYMTAB).unwrap()
    }

    /// The first relocation section with entries, applying to a section with contents.
    fn rela(&self) -> &Section {
        self.sections
            .iter()
            .find(|s| s.ty == SHT_RELA && s.size > 0)
            .expect("a SHT_RELA section")
    }

    fn symbol_count(&self) -> u64 {
        let s = self.symtab();
        s.size / s.entsize
    }

    /// File offset of the symbol-table entry for a global (non-local) symbol.
    fn first_global_symbol(&self) -> usize {
        let s = self.symtab();
        // sh_info of .symtab is the index of the first non-local symbol.
        s.offset as usize + s.info as usize * 24
    }
}

#[test]
fn layout_reader_understands_the_sample() {
    let obj = sample_object();
    let l = Layout::parse(&obj);
    assert!(l.sections.iter().any(|s| s.name == ".text"));
    assert!(l.rela().name.starts_with(".rela"));
    assert!(l.symbol_count() > 1);
    assert!(l.shoff + l.shentsize * l.sections.len() <= obj.len());
    assert_eq!(l.sections[l.symtab().link as usize].name, ".strtab");
    // And the control: the undamaged object loads and is callable by name.
    let m = Module::load(&obj).expect("the undamaged sample must load");
    assert_eq!(m.functions(), ["string_table".to_string()]);
    assert!(m.symbol("string_table").is_some());
}

#[test]
fn truncated_objects_are_errors() {
    let obj = sample_object();
    let l = Layout::parse(&obj);
    let text = l.by_name(".text");
    let rela = l.rela();
    let mut cuts = vec![
        ("empty", 0),
        ("1 byte", 1),
        ("magic only", 4),
        ("e_ident only", 16),
        ("mid ELF header", 40),
        ("ELF header minus one byte", 63),
        ("ELF header only", 64),
        ("mid .text", (text.offset + text.size / 2) as usize),
        ("mid .rela", (rela.offset + rela.size / 2 + 3) as usize),
        ("before the section table", l.shoff),
        ("mid first section header", l.shoff + 30),
        (
            "mid section table",
            l.shoff + l.shentsize * (l.sections.len() / 2) + 17,
        ),
        ("last byte missing", obj.len() - 1),
    ];
    // The section table is at the end in clang's output; if not, cut through it anyway.
    cuts.retain(|&(_, n)| n < obj.len());
    let failures: Vec<String> = cuts
        .iter()
        .filter_map(|&(what, n)| load_must_fail(&format!("cut at {n} ({what})"), &obj[..n]).err())
        .collect();
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

type Patch = Box<dyn Fn(&mut Vec<u8>, &Layout)>;

#[test]
fn corrupted_objects_are_errors() {
    let obj = sample_object();
    let l = Layout::parse(&obj);
    let len = obj.len() as u64;
    let patches: Vec<(&str, Patch)> = vec![
        ("bad magic", Box::new(|b, _| b[1] = b'X')),
        ("EI_CLASS = ELFCLASS32", Box::new(|b, _| b[4] = 1)),
        ("EI_CLASS = none", Box::new(|b, _| b[4] = 0)),
        ("EI_DATA = big-endian", Box::new(|b, _| b[5] = 2)),
        ("EI_DATA = none", Box::new(|b, _| b[5] = 0)),
        ("e_type = ET_EXEC", Box::new(|b, _| wr16(b, 16, 2))),
        ("e_type = ET_DYN", Box::new(|b, _| wr16(b, 16, 3))),
        ("e_type = ET_CORE", Box::new(|b, _| wr16(b, 16, 4))),
        ("e_machine unknown", Box::new(|b, _| wr16(b, 18, 0x7777))),
        (
            "e_shoff past the end",
            Box::new(move |b, _| wr64(b, 40, len + 64)),
        ),
        (
            "e_shoff near u64::MAX",
            Box::new(|b, _| wr64(b, 40, u64::MAX - 8)),
        ),
        ("e_shnum past the end", Box::new(|b, _| wr16(b, 60, 0xfeff))),
        ("e_shentsize wrong", Box::new(|b, _| wr16(b, 58, 40))),
        (
            "e_shstrndx out of range",
            Box::new(|b, l| wr16(b, 62, l.sections.len() as u16 + 5)),
        ),
        (
            ".text sh_offset past the end",
            Box::new(move |b, l| wr64(b, l.by_name(".text").header_at + SH_OFFSET, len + 100)),
        ),
        (
            ".text sh_size past the end",
            Box::new(move |b, l| wr64(b, l.by_name(".text").header_at + SH_SIZE, len * 2)),
        ),
        (
            ".text sh_offset + sh_size overflows",
            Box::new(|b, l| wr64(b, l.by_name(".text").header_at + SH_OFFSET, u64::MAX - 4)),
        ),
        (
            ".symtab sh_size past the end",
            Box::new(move |b, l| wr64(b, l.symtab().header_at + SH_SIZE, len * 24)),
        ),
        (
            ".symtab sh_entsize = 0",
            Box::new(|b, l| wr64(b, l.symtab().header_at + SH_ENTSIZE, 0)),
        ),
        (
            ".symtab sh_link (string table) out of range",
            Box::new(|b, l| wr32(b, l.symtab().header_at + SH_LINK, 9999)),
        ),
        (
            ".rela sh_info (target section) out of range",
            Box::new(|b, l| wr32(b, l.rela().header_at + SH_INFO, 9999)),
        ),
        (
            ".rela sh_link (symbol table) out of range",
            Box::new(|b, l| wr32(b, l.rela().header_at + SH_LINK, 9999)),
        ),
        (
            ".rela sh_offset past the end",
            Box::new(move |b, l| wr64(b, l.rela().header_at + SH_OFFSET, len + 8)),
        ),
        (
            "relocation symbol index out of range",
            Box::new(|b, l| {
                let r = l.rela().offset as usize;
                let info = rd64(b, r + 8);
                let bad = l.symbol_count() + 1000;
                wr64(b, r + 8, (bad << 32) | (info & 0xffff_ffff));
            }),
        ),
        (
            "relocation symbol index u32::MAX",
            Box::new(|b, l| {
                let r = l.rela().offset as usize;
                let info = rd64(b, r + 8);
                wr64(b, r + 8, (0xffff_ffffu64 << 32) | (info & 0xffff_ffff));
            }),
        ),
        (
            "relocation offset past its section",
            Box::new(|b, l| {
                let rela = l.rela();
                let target = &l.sections[rela.info as usize];
                wr64(b, rela.offset as usize, target.size + 0x1000);
            }),
        ),
        (
            "relocation offset u64::MAX",
            Box::new(|b, l| wr64(b, l.rela().offset as usize, u64::MAX)),
        ),
        (
            "unknown relocation type",
            Box::new(|b, l| {
                let r = l.rela().offset as usize;
                let info = rd64(b, r + 8);
                wr64(b, r + 8, (info & !0xffff_ffff) | 0xfff0);
            }),
        ),
        (
            "symbol section index out of range",
            Box::new(|b, l| {
                let s = l.first_global_symbol();
                wr16(b, s + 6, l.sections.len() as u16 + 10);
            }),
        ),
        (
            "symbol name past the string table",
            Box::new(|b, l| {
                let s = l.first_global_symbol();
                wr32(b, s, 0x7fff_fff0);
            }),
        ),
    ];
    let mut failures = Vec::new();
    for (what, patch) in &patches {
        let mut bytes = obj.clone();
        patch(&mut bytes, &l);
        assert_ne!(bytes, obj, "{what}: the patch changed nothing");
        if let Err(e) = load_must_fail(what, &bytes) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

#[test]
fn wrong_machine_is_an_error_naming_both_architectures() {
    let h = host();
    let foreign = if h == Arch::Aarch64 {
        Arch::X86_64
    } else {
        Arch::Aarch64
    };
    let obj = compile(&kernel_source("elementwise_sqrt_fma.c"), Lang::C, foreign);
    let text = load_must_fail("foreign object", &obj).unwrap_or_else(|e| panic!("{e}"));
    let lower = text.to_lowercase();
    assert!(
        lower.contains(foreign.name()),
        "error does not name the object's architecture {foreign}: {text}"
    );
    assert!(
        lower.contains(h.name()),
        "error does not name the host architecture {h}: {text}"
    );
}

#[test]
fn undefined_symbols_are_named() {
    let cases: [(&str, &[u8]); 2] = [
        (
            "no_such_function_xyz",
            b"extern void no_such_function_xyz(void);\nvoid k(void) { no_such_function_xyz(); }\n",
        ),
        (
            "no_such_data_xyz",
            b"extern int no_such_data_xyz;\nint k(void) { return no_such_data_xyz; }\n",
        ),
    ];
    for (name, src) in cases {
        let obj = compile(src, Lang::C, host());
        let text = load_must_fail(name, &obj).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            text.contains(name),
            "Module::load error does not name {name}: {text}"
        );

        // The same through run().
        let mut req = RunRequest::new(src.to_vec(), Lang::C);
        req.ret = if name.contains("data") {
            RetType::I32
        } else {
            RetType::Void
        };
        // SAFETY: the link fails, so nothing is called (and `k` has the declared type).
        match unsafe { run(&req) } {
            Err(e) => assert!(e.to_string().contains(name), "run error lacks {name}: {e}"),
            Ok(_) => panic!("run succeeded with undefined {name}"),
        }
    }
}

#[test]
fn unknown_entry_lists_the_available_functions() {
    let mut req = request(&elfjit_tests::case("elementwise_sqrt_fma"), host(), 2).unwrap();
    req.entry = Some("nope".to_string());
    // SAFETY: the entry does not exist, so nothing is called.
    match unsafe { run(&req) } {
        Err(Error::UnknownEntry { name, available }) => {
            assert_eq!(name, "nope");
            assert_eq!(available, ["ew_sqrt_fma".to_string()]);
        }
        Err(e) => panic!("expected UnknownEntry, got {e:?}"),
        Ok(_) => panic!("entry `nope` was called"),
    }
}

#[test]
fn several_globals_without_entry_is_ambiguous() {
    let src = b"int first(void) { return 1; }\nint second(void) { return 2; }\n\
                static int hidden(void) { return 3; }\nint (*keep)(void) = hidden;\n";
    let mut req = RunRequest::new(src.to_vec(), Lang::C);
    req.ret = RetType::I32;
    // SAFETY: no entry is chosen, so nothing is called.
    match unsafe { run(&req) } {
        Err(Error::AmbiguousEntry { mut available }) => {
            available.sort();
            // Static functions and data objects are not entry candidates.
            assert_eq!(available, ["first".to_string(), "second".to_string()]);
        }
        Err(e) => panic!("expected AmbiguousEntry, got {e:?}"),
        Ok(o) => panic!("called {} without an entry", o.entry),
    }
    // With an entry it runs.
    req.entry = Some("second".into());
    // SAFETY: `second` is `int second(void)`, as declared.
    let out = unsafe { run(&req) }.expect("entry second");
    assert_eq!(out.ret, Some(elfjit::args::Scalar::I32(2)));
}

#[test]
fn static_helpers_are_not_exported() {
    let obj = compile(&kernel_source("static_helpers.c"), Lang::C, host());
    let m = Module::load(&obj).expect("static_helpers loads");
    assert_eq!(m.functions(), ["static_helpers".to_string()]);
    for local in ["poly", "act", "fib"] {
        assert!(m.symbol(local).is_none(), "static {local} is visible");
    }
}

#[test]
fn clang_errors_carry_the_diagnostic() {
    let compiler = Compiler::find().expect("clang");
    let c_err = compiler
        .compile(
            b"void k(int x { return x; }\n",
            &CompileOptions::new(Lang::C, host()),
        )
        .expect_err("a C syntax error compiles");
    match &c_err {
        CompileError::ClangFailed { stderr, .. } => {
            assert!(stderr.contains("error:"), "no diagnostic: {stderr}");
            assert!(
                stderr.contains("expected"),
                "not clang's parse error: {stderr}"
            );
        }
        e => panic!("expected ClangFailed, got {e:?}"),
    }
    assert!(
        c_err.to_string().contains("error:"),
        "Display hides stderr: {c_err}"
    );

    let ir_err = compiler
        .compile(
            b"define void @k( {\n",
            &CompileOptions::new(Lang::Ir, host()),
        )
        .expect_err("broken IR compiles");
    match &ir_err {
        CompileError::ClangFailed { stderr, .. } => assert!(stderr.contains("error"), "{stderr}"),
        e => panic!("expected ClangFailed, got {e:?}"),
    }

    // Through run() too, with the source line in the message.
    let mut req = RunRequest::new(
        b"int k(void) { return undeclared_thing; }\n".to_vec(),
        Lang::C,
    );
    req.ret = RetType::I32;
    // SAFETY: the source does not compile, so nothing is called.
    match unsafe { run(&req) } {
        Err(Error::Compile(CompileError::ClangFailed { stderr, .. })) => {
            assert!(stderr.contains("undeclared_thing"), "{stderr}")
        }
        Err(e) => panic!("expected ClangFailed, got {e:?}"),
        Ok(_) => panic!("ran code with an undeclared identifier"),
    }
}

#[test]
fn missing_clang_is_reported() {
    let empty = std::env::temp_dir().join(format!("elfjit-no-clang-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let result = Compiler::find_with(None, Some(empty.as_os_str()));
    let _ = std::fs::remove_dir(&empty);
    match result {
        Err(e @ CompileError::ClangNotFound { .. }) => {
            let text = e.to_string();
            assert!(text.contains("ELFJIT_CLANG"), "no hint how to fix: {text}");
        }
        Err(e) => panic!("expected ClangNotFound, got {e:?}"),
        Ok(c) => panic!(
            "found a clang in an empty directory: {}",
            c.path().display()
        ),
    }
    match Compiler::find_with(Some("/nonexistent/dir/clang".as_ref()), None) {
        Err(CompileError::ClangNotFound { tried }) => {
            assert!(
                tried.iter().any(|t| t.contains("/nonexistent/dir/clang")),
                "{tried:?}"
            )
        }
        Err(e) => panic!("expected ClangNotFound, got {e:?}"),
        Ok(_) => panic!("accepted a nonexistent ELFJIT_CLANG"),
    }
}

#[test]
fn malformed_argument_specs_are_errors() {
    for bad in [
        "f32[4]=1,2",
        "q32:1",
        "i8:300",
        "u16:-1",
        "f32[2]=1,x",
        "f32[4",
        "i32",
        "f32[4]=fill:",
        "f64:1e999",
    ] {
        match ArgSpec::parse(bad) {
            Err(Error::BadArgument { .. }) => {}
            Err(e) => panic!("{bad}: expected BadArgument, got {e:?}"),
            Ok(s) => panic!("{bad}: accepted as {s:?}"),
        }
    }
}
