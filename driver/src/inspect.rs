//! `elfjit inspect`: the planned layout of an object, linked at a notional address into a
//! buffer (nothing is executed, so any architecture can be inspected on any host).

use crate::error::{Error, Result};
use elfjit_core::elf::{Object, Symbol};
use elfjit_core::plan::SegmentKind;
use elfjit_core::{Arch, Plan, RelocRecord, SliceBackend, Via};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Where the image is pretended to live.
pub const NOTIONAL_BASE: u64 = 0x10_0000;
/// Page size used for the notional layout.
const PAGE: u64 = 0x1000;

/// Plans and links `object` for `target` at [`NOTIONAL_BASE`] and describes the result:
/// segments, sections with addresses, symbols, each relocation with its computed value,
/// stubs and GOT slots. External symbols get notional addresses just past the image.
pub fn report(object: &[u8], target: Arch) -> Result<String> {
    let parsed = Object::parse(object)?;
    if parsed.arch() != target {
        return Err(Error::Unsupported(format!(
            "the object is for {}, not {target}",
            parsed.arch()
        )));
    }
    let plan = Plan::new(&[object], PAGE)?;
    let image_size = plan.image_size();
    // Up to the core's 1 GiB image limit: allocated fallibly.
    let size = usize::try_from(image_size).unwrap_or(usize::MAX);
    let mut buffer: Vec<u8> = Vec::new();
    buffer
        .try_reserve_exact(size)
        .map_err(|_| Error::Memory(format!("cannot allocate {size} bytes to lay the image out")))?;
    buffer.resize(size, 0);
    let mut backend = SliceBackend::new(&mut buffer, NOTIONAL_BASE, PAGE);
    let mut externals: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let external_base = NOTIONAL_BASE + image_size + 0x1_0000;
    let mut resolver = |name: &[u8]| {
        let next = external_base + 0x10 * externals.len() as u64;
        Some(*externals.entry(name.to_vec()).or_insert(next))
    };
    let mut records: Vec<RelocRecord> = Vec::new();
    let image = plan.link_observed(&mut backend, &mut resolver, &mut |r: &RelocRecord| {
        records.push(*r)
    })?;
    let plan = image.plan();
    let mut out = String::new();
    let w = &mut out;

    let _ = writeln!(
        w,
        "object: {target}, {} sections, {} symbols, {} relocations",
        parsed.section_count(),
        parsed.symbol_count(),
        plan.relocation_count()
    );
    let _ = writeln!(
        w,
        "image: {image_size:#x} bytes at notional address {NOTIONAL_BASE:#x} (page size {PAGE:#x})"
    );
    let _ = writeln!(w, "\nsegments:");
    for kind in SegmentKind::ALL {
        let s = plan.segment(kind);
        let (name, perm) = match kind {
            SegmentKind::Code => ("code", "r-x"),
            SegmentKind::ReadOnly => ("read-only", "r--"),
            SegmentKind::Data => ("data", "rw-"),
        };
        let _ = writeln!(
            w,
            "  {name:<10} {perm}  {:#10x}  size {:#x}  mapped {:#x}",
            NOTIONAL_BASE + s.offset,
            s.size,
            s.mapped
        );
    }

    let _ = writeln!(w, "\nsections:");
    for index in 0..parsed.section_count() {
        let Ok(section) = parsed.section(index) else {
            continue;
        };
        let name = String::from_utf8_lossy(section.name);
        match plan.section_place(0, index) {
            Some(place) if place.loaded => {
                let _ = writeln!(
                    w,
                    "  [{index:2}] {name:<24} {:<9} {:#10x}  size {:#x}  align {}{}",
                    segment_name(place.segment),
                    NOTIONAL_BASE + place.offset,
                    place.size,
                    section.align,
                    if place.zeroed { "  (zero-filled)" } else { "" }
                );
            }
            _ if index != 0 => {
                let _ = writeln!(w, "  [{index:2}] {name:<24} not loaded");
            }
            _ => {}
        }
    }

    let _ = writeln!(w, "\nsymbols:");
    let (got_slots, got_offset) = plan.got();
    let (stubs, stub_offset) = plan.stubs();
    let mut got_rows = vec![String::new(); got_slots as usize];
    let mut stub_rows = vec![String::new(); stubs as usize];
    for index in 1..parsed.symbol_count() {
        let Ok(sym) = parsed.symbol(index) else {
            continue;
        };
        if sym.kind == object::elf::STT_FILE {
            continue;
        }
        let name = display_name(&parsed, &sym);
        let referenced_external =
            sym.shndx == object::elf::SHN_UNDEF && externals.contains_key(sym.name);
        let address = if sym.shndx == object::elf::SHN_UNDEF && !referenced_external {
            None
        } else {
            image.address_of(0, index)
        };
        let (got, stub) = plan.symbol_slots(0, index);
        let mut extra = String::new();
        if let Some(slot) = got {
            let _ = write!(extra, "  [GOT {slot}]");
            if let Some(row) = got_rows.get_mut(slot.index()) {
                *row = format!("{name} = {}", hex_or(address));
            }
        }
        if let Some(stub) = stub {
            let _ = write!(extra, "  [stub {stub}]");
            if let Some(row) = stub_rows.get_mut(stub.index()) {
                *row = format!("{name} → {}", hex_or(address));
            }
        }
        let _ = writeln!(
            w,
            "  {name:<28} {:<7} {:<6} {:>10}  size {:<5}{}",
            type_name(sym.kind),
            bind_name(sym.bind),
            hex_or(address),
            sym.size,
            extra
        );
    }

    let _ = writeln!(
        w,
        "\nGOT: {got_slots} slot(s) at {:#x}",
        NOTIONAL_BASE + got_offset
    );
    for (i, row) in got_rows.iter().enumerate() {
        let _ = writeln!(
            w,
            "  [{i}] {:#x}  {row}",
            NOTIONAL_BASE + got_offset + 8 * i as u64
        );
    }
    let _ = writeln!(w, "stubs: {stubs} at {:#x}", NOTIONAL_BASE + stub_offset);
    let stub_size = if stubs == 0 {
        0
    } else {
        (plan.segment(SegmentKind::Code).size - stub_offset) / u64::from(stubs)
    };
    for (i, row) in stub_rows.iter().enumerate() {
        let _ = writeln!(
            w,
            "  [{i}] {:#x}  {row}",
            NOTIONAL_BASE + stub_offset + stub_size * i as u64
        );
    }

    let _ = writeln!(w, "\nrelocations:");
    for r in &records {
        let section =
            String::from_utf8_lossy(parsed.section(r.section).map(|s| s.name).unwrap_or(b"?"))
                .into_owned();
        let symbol = parsed
            .symbol(r.rela.symbol as usize)
            .map(|s| display_name(&parsed, &s))
            .unwrap_or_default();
        let via = match r.applied.via {
            Via::Direct => "direct",
            Via::Got => "via GOT",
            Via::Stub => "via stub",
            Via::Nothing => "nothing written",
        };
        let _ = writeln!(
            w,
            "  {section}+{:#06x}  {:<24} {symbol}{:+}  S={:#x} P={:#x}  value={:#x} ({via})",
            r.rela.offset,
            target.reloc_name(r.rela.r_type),
            r.rela.addend,
            r.symbol_address,
            r.place_address,
            r.applied.value
        );
    }
    if !externals.is_empty() {
        let _ = writeln!(
            w,
            "\nexternal symbols were given notional addresses from {external_base:#x}; at load \
             time they resolve through the process or the runner"
        );
    }
    Ok(out)
}

fn segment_name(kind: SegmentKind) -> &'static str {
    match kind {
        SegmentKind::Code => "code",
        SegmentKind::ReadOnly => "read-only",
        SegmentKind::Data => "data",
    }
}

fn display_name(object: &Object<'_>, sym: &Symbol<'_>) -> String {
    if sym.name.is_empty() && sym.kind == object::elf::STT_SECTION {
        let section = object
            .section(usize::from(sym.shndx.0))
            .map(|s| s.name)
            .unwrap_or(b"?");
        return format!("[section {}]", String::from_utf8_lossy(section));
    }
    String::from_utf8_lossy(sym.name).into_owned()
}

fn hex_or(address: Option<u64>) -> String {
    address.map_or_else(|| "-".to_string(), |a| format!("{a:#x}"))
}

fn type_name(kind: object::elf::SymbolType) -> &'static str {
    match kind {
        object::elf::STT_NOTYPE => "NOTYPE",
        object::elf::STT_OBJECT => "OBJECT",
        object::elf::STT_FUNC => "FUNC",
        object::elf::STT_SECTION => "SECTION",
        object::elf::STT_COMMON => "COMMON",
        object::elf::STT_TLS => "TLS",
        _ => "OTHER",
    }
}

fn bind_name(bind: object::elf::SymbolBind) -> &'static str {
    match bind {
        object::elf::STB_LOCAL => "LOCAL",
        object::elf::STB_GLOBAL => "GLOBAL",
        object::elf::STB_WEAK => "WEAK",
        _ => "OTHER",
    }
}
