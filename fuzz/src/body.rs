//! The fuzz targets' bodies, with no dependency but elfjit-core (with `alloc`): included by
//! the fuzz crate (`src/lib.rs`) and by `core/tests/fuzz_regressions.rs`, which replays
//! every saved input under plain `cargo test` and compares its outcome with the one
//! recorded beside it. Inputs are raw bytes with small fixed headers (no `arbitrary`
//! decoding), so a saved input means the same thing everywhere.

use elfjit_core::plan::{Input, ObjectEntry, PlanSizes};
use elfjit_core::{Error, Plan, PlanBuffers, SliceBackend};

/// Largest image a fuzz input may ask to link (bigger plans are still planned, not linked).
pub const MAX_LINKED_IMAGE: u64 = 8 << 20;

/// The page sizes a link may use.
pub const PAGE_SIZES: [u64; 3] = [0x1000, 0x4000, 0x1_0000];

/// Names the fuzzed objects are given (relocation errors must carry them).
const NAMES: [&str; 4] = ["first.o", "second.o", "third.o", "fourth.o"];

/// What an input did, as a stable one-line summary: the error's kind (its variant, and a
/// relocation error's problem), or how the link went. Recorded beside each saved input.
pub fn outcome(stage: &str, result: &Result<(), Error>) -> String {
    match result {
        Ok(()) => format!("{stage}: ok"),
        Err(Error::Relocation(r)) => {
            let problem = format!("{:?}", r.problem);
            let problem = problem.split([' ', '{', '(']).next().unwrap_or("");
            format!("{stage}: Relocation {problem}")
        }
        Err(e) => {
            let debug = format!("{e:?}");
            format!(
                "{stage}: {}",
                debug.split([' ', '{', '(']).next().unwrap_or("")
            )
        }
    }
}

/// Parses and plans `objects` (named), then links them at `base` into a buffer, resolving
/// every external to an address derived from its name and `seed`; returns the outcome.
/// Errors are fine; panics, overflows, hangs, unbounded allocations and broken invariants
/// (checked here) are bugs:
/// - the counting pass sizes the plan exactly, and lent storage of that size plans the same;
/// - a relocation error names the object it is in;
/// - linking does not change the plan: a second link at the same base writes the same
///   bytes, and one at another base also ends in an outcome.
pub fn plan_and_link(objects: &[&[u8]], base: u64, page: u64, seed: u64) -> String {
    let inputs: Vec<Input<'_>> = objects
        .iter()
        .zip(NAMES.iter().cycle())
        .map(|(&bytes, &name)| Input { name, bytes })
        .collect();
    let plan = match Plan::new_named(&inputs, page) {
        Ok(plan) => plan,
        Err(e) => return outcome("plan", &Err(e)),
    };
    let sizes = PlanSizes::count(objects).expect("the counting pass accepts what plans");
    assert_eq!(plan.sizes(), sizes, "the counting pass is exact");
    check_lent_storage(objects, page, sizes, &plan);

    let size = plan.image_size();
    if size > MAX_LINKED_IMAGE {
        return "plan: ok, too large to link".into();
    }
    let base = base & !(page - 1);
    let mut resolver = |name: &[u8]| -> Option<u64> {
        let hash = name.iter().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        // Some names stay undefined, to exercise that path too.
        (hash % 17 != 0).then_some(hash >> (hash % 24))
    };
    let mut first = vec![0u8; size as usize];
    let linked = match plan.link(
        &mut SliceBackend::new(&mut first, base, page),
        &mut resolver,
    ) {
        Ok(image) => {
            // Everything a user may ask of a linked image.
            let _ = image.functions().count();
            let _ = image.symbol("k");
            let _ = image.globals().map(|g| g.address).max();
            Ok(())
        }
        Err(e) => {
            if let Error::Relocation(r) = &e {
                let object = r.object as usize;
                assert!(object < objects.len(), "{e}");
                let name = r.object_name.map(|n| n.to_string());
                assert_eq!(name.as_deref(), NAMES.get(object % NAMES.len()).copied());
            }
            Err(e)
        }
    };
    // Linked again at the same base: the same bytes (the plan did not change).
    let mut again = vec![0u8; size as usize];
    let mut externals = vec![0u64; plan.external_count()];
    let second = plan.link_in(
        &mut SliceBackend::new(&mut again, base, page),
        &mut resolver,
        &mut externals,
    );
    assert_eq!(
        second.is_ok(),
        linked.is_ok(),
        "a second link ends the same way"
    );
    if linked.is_ok() {
        assert!(
            first == again,
            "a second link at the same base writes the same bytes"
        );
    }
    // And elsewhere (ranges may differ there: any outcome, no panic).
    let elsewhere = base.wrapping_add(seed.rotate_left(17) & !(page - 1));
    let mut third = vec![0u8; size as usize];
    let _ = plan.link(
        &mut SliceBackend::new(&mut third, elsewhere, page),
        &mut resolver,
    );
    outcome("link", &linked)
}

/// Plans `objects` into lent storage of exactly `sizes` (as planned by `plan`), and into
/// storage one entry short in the first non-empty table, which must be refused by name.
fn check_lent_storage(objects: &[&[u8]], page: u64, sizes: PlanSizes, plan: &Plan<'_>) {
    let mut buffers = PlanBuffers::new(sizes);
    let mut entries = vec![ObjectEntry::EMPTY; objects.len()];
    let lent = Plan::new_in(objects, page, buffers.lend(&mut entries))
        .expect("lent storage of the counted size plans");
    assert_eq!(
        (lent.layout(), lent.got(), lent.stubs(), lent.image_size()),
        (plan.layout(), plan.got(), plan.stubs(), plan.image_size())
    );
    let (table, mut short) = if sizes.symbols > 0 {
        ("symbols", sizes)
    } else {
        ("sections", sizes)
    };
    match table {
        "symbols" => short.symbols -= 1,
        _ => short.sections = short.sections.saturating_sub(1),
    }
    if short == sizes {
        return;
    }
    let mut buffers = PlanBuffers::new(short);
    let mut entries = vec![ObjectEntry::EMPTY; objects.len()];
    let err = Plan::new_in(objects, page, buffers.lend(&mut entries)).err();
    assert!(
        matches!(err, Some(Error::StorageTooSmall { table: t, .. }) if t == table),
        "{err:?}"
    );
}

/// One field of an ELF structure to overwrite.
#[derive(Debug, Clone, Copy)]
pub enum Edit {
    /// A relocation entry (among all SHT_RELA sections, in file order).
    Rela {
        nth: u16,
        field: RelaField,
        value: u64,
    },
    /// A symbol table entry.
    Symbol {
        nth: u16,
        field: SymbolField,
        value: u64,
    },
    /// A section header.
    Section {
        nth: u8,
        field: SectionField,
        value: u64,
    },
    /// Any byte of the file.
    Byte { at: u32, value: u8 },
}

#[derive(Debug, Clone, Copy)]
pub enum RelaField {
    Offset,
    Symbol,
    Type,
    Addend,
}

#[derive(Debug, Clone, Copy)]
pub enum SymbolField {
    Name,
    Info,
    Other,
    Shndx,
    Value,
    Size,
}

#[derive(Debug, Clone, Copy)]
pub enum SectionField {
    Name,
    Type,
    Flags,
    Offset,
    Size,
    Link,
    Info,
    Align,
    EntSize,
}

fn get_u64(b: &[u8], at: usize, width: usize) -> Option<u64> {
    let bytes = b.get(at..at.checked_add(width)?)?;
    let mut v = [0u8; 8];
    v[..width].copy_from_slice(bytes);
    Some(u64::from_le_bytes(v))
}

fn put(b: &mut [u8], at: usize, width: usize, value: u64) {
    let Some(end) = at.checked_add(width) else {
        return;
    };
    if let Some(dst) = b.get_mut(at..end) {
        dst.copy_from_slice(&value.to_le_bytes()[..width]);
    }
}

/// (file offset, entry count) of each section of type `kind`.
fn tables(b: &[u8], kind: u32, entsize: usize) -> Vec<(usize, usize)> {
    let (Some(shoff), Some(shnum)) = (get_u64(b, 0x28, 8), get_u64(b, 0x3c, 2)) else {
        return Vec::new();
    };
    (0..shnum as usize)
        .filter_map(|i| {
            let sh = (shoff as usize).checked_add(i * 64)?;
            (get_u64(b, sh.saturating_add(4), 4)? == u64::from(kind)).then_some(())?;
            let offset = get_u64(b, sh.saturating_add(0x18), 8)? as usize;
            let size = get_u64(b, sh.saturating_add(0x20), 8)? as usize;
            Some((offset, size / entsize))
        })
        .collect()
}

/// The file offset of the `nth` entry across the tables (wrapping), if any.
fn nth_entry(tables: &[(usize, usize)], nth: usize, entsize: usize) -> Option<usize> {
    let total: usize = tables.iter().map(|t| t.1).sum();
    if total == 0 {
        return None;
    }
    let mut n = nth % total;
    for &(offset, count) in tables {
        if n < count {
            return offset.checked_add(n * entsize);
        }
        n -= count;
    }
    None
}

/// Applies one edit to an ELF64 little-endian object (edits that miss are ignored).
pub fn mutate(object: &mut [u8], edit: &Edit) {
    match *edit {
        Edit::Rela { nth, field, value } => {
            let Some(at) = nth_entry(&tables(object, 4, 24), usize::from(nth), 24) else {
                return;
            };
            match field {
                RelaField::Offset => put(object, at, 8, value),
                RelaField::Type => put(object, at.saturating_add(8), 4, value),
                RelaField::Symbol => put(object, at.saturating_add(12), 4, value),
                RelaField::Addend => put(object, at.saturating_add(16), 8, value),
            }
        }
        Edit::Symbol { nth, field, value } => {
            let Some(at) = nth_entry(&tables(object, 2, 24), usize::from(nth), 24) else {
                return;
            };
            match field {
                SymbolField::Name => put(object, at, 4, value),
                SymbolField::Info => put(object, at.saturating_add(4), 1, value),
                SymbolField::Other => put(object, at.saturating_add(5), 1, value),
                SymbolField::Shndx => put(object, at.saturating_add(6), 2, value),
                SymbolField::Value => put(object, at.saturating_add(8), 8, value),
                SymbolField::Size => put(object, at.saturating_add(16), 8, value),
            }
        }
        Edit::Section { nth, field, value } => {
            let (Some(shoff), Some(shnum)) = (get_u64(object, 0x28, 8), get_u64(object, 0x3c, 2))
            else {
                return;
            };
            if shnum == 0 {
                return;
            }
            let Some(at) = (shoff as usize).checked_add((usize::from(nth) % shnum as usize) * 64)
            else {
                return;
            };
            let (offset, width) = match field {
                SectionField::Name => (0, 4),
                SectionField::Type => (4, 4),
                SectionField::Flags => (8, 8),
                SectionField::Offset => (0x18, 8),
                SectionField::Size => (0x20, 8),
                SectionField::Link => (0x28, 4),
                SectionField::Info => (0x2c, 4),
                SectionField::Align => (0x30, 8),
                SectionField::EntSize => (0x38, 8),
            };
            put(object, at.saturating_add(offset), width, value);
        }
        Edit::Byte { at, value } => {
            let len = object.len();
            if len > 0 {
                if let Some(b) = object.get_mut(at as usize % len) {
                    *b = value;
                }
            }
        }
    }
}

/// Reads a little-endian integer of `width` bytes from the front of `input`, advancing it
/// (missing bytes read as zero).
fn take(input: &mut &[u8], width: usize) -> u64 {
    let n = width.min(input.len());
    let mut v = [0u8; 8];
    v[..n].copy_from_slice(&input[..n]);
    *input = &input[n..];
    u64::from_le_bytes(v)
}

/// Target `parse_plan`: arbitrary bytes as one object; parse, walk, plan, link.
pub fn run_parse_plan(data: &[u8]) -> String {
    if let Ok(object) = elfjit_core::elf::Object::parse(data) {
        for i in 0..object.section_count() {
            let _ = object.section(i);
            let _ = object.relocations(i).map(|r| r.count());
        }
        for i in 0..object.symbol_count() {
            let _ = object.symbol(i);
        }
    }
    plan_and_link(&[data], 0x10_0000, 0x1000, 0)
}

/// Target `link`: `base: u64, page: u8, seed: u64`, then up to four objects separated by
/// the bytes `"ELFJIT|"`, linked into one image (the objects named `first.o`, ...).
pub fn run_link(mut input: &[u8]) -> String {
    let base = take(&mut input, 8);
    let page = PAGE_SIZES[take(&mut input, 1) as usize % PAGE_SIZES.len()];
    let seed = take(&mut input, 8);
    let mut objects: Vec<&[u8]> = Vec::new();
    let mut rest = input;
    while objects.len() < 4 {
        match rest.windows(7).position(|w| w == b"ELFJIT|") {
            Some(i) => {
                objects.push(&rest[..i]);
                rest = &rest[i + 7..];
            }
            None => {
                objects.push(rest);
                break;
            }
        }
    }
    plan_and_link(&objects, base, page, seed)
}

/// Target `mutate_objects`: `seed index: u16, base: u64, page: u8, resolver seed: u64`,
/// then up to 16 edits of 12 bytes (`kind: u8, field: u8, nth: u16, value: u64`) applied
/// to a copy of seed object `index % seeds.len()` before it is planned and linked.
pub fn run_mutate(mut input: &[u8], seeds: &[&[u8]]) -> String {
    if seeds.is_empty() {
        return "no seeds".into();
    }
    let index = take(&mut input, 2) as usize % seeds.len();
    let base = take(&mut input, 8);
    let page = PAGE_SIZES[take(&mut input, 1) as usize % PAGE_SIZES.len()];
    let resolver_seed = take(&mut input, 8);
    let mut object = seeds[index].to_vec();
    for _ in 0..16 {
        if input.is_empty() {
            break;
        }
        let kind = take(&mut input, 1);
        let field = take(&mut input, 1) as usize;
        let nth = take(&mut input, 2);
        let value = take(&mut input, 8);
        const RELA: [RelaField; 4] = [
            RelaField::Offset,
            RelaField::Symbol,
            RelaField::Type,
            RelaField::Addend,
        ];
        const SYM: [SymbolField; 6] = [
            SymbolField::Name,
            SymbolField::Info,
            SymbolField::Other,
            SymbolField::Shndx,
            SymbolField::Value,
            SymbolField::Size,
        ];
        const SEC: [SectionField; 9] = [
            SectionField::Name,
            SectionField::Type,
            SectionField::Flags,
            SectionField::Offset,
            SectionField::Size,
            SectionField::Link,
            SectionField::Info,
            SectionField::Align,
            SectionField::EntSize,
        ];
        let edit = match kind % 4 {
            0 => Edit::Rela {
                nth: nth as u16,
                field: RELA[field % RELA.len()],
                value,
            },
            1 => Edit::Symbol {
                nth: nth as u16,
                field: SYM[field % SYM.len()],
                value,
            },
            2 => Edit::Section {
                nth: nth as u8,
                field: SEC[field % SEC.len()],
                value,
            },
            _ => Edit::Byte {
                at: (nth | (value << 16)) as u32,
                value: value as u8,
            },
        };
        mutate(&mut object, &edit);
    }
    plan_and_link(&[&object], base, page, resolver_seed)
}
