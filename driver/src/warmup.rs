//! The object [`crate::prepare`] links once and drops: a kernel-shaped module (a function,
//! a read-only table, data pointing at it and at an external symbol), written for the host
//! with `object::write`, so that a fresh process's first real load runs code that has run
//! before. What that leaves warm is what no `madvise` can make ready: the instruction and
//! data caches, the TLB and the branch predictors over the parser, the planner, the linker
//! and the arena, and the heap's first blocks of each size the load allocates.
//!
//! Only relocations every architecture has for data (absolute 64-bit, PC-relative 32-bit)
//! are used, so the same object is valid on all five; its code is never run.

use elfjit_core::Arch;
use object::write::{Object, Relocation, Symbol, SymbolSection};
use object::{
    Architecture, BinaryFormat, Endianness, FileFlags, RelocationFlags, SectionKind, SymbolFlags,
    SymbolKind, SymbolScope,
};

/// The undefined symbol the object's data refers to; [`resolve`] answers it, so warming up
/// never searches the process.
pub(crate) const EXTERNAL: &str = "elfjit_warmup_external";

/// The object for `arch`, or `None` if `object` cannot write one (it can for all five).
pub(crate) fn object(arch: Arch) -> Option<Vec<u8>> {
    use object::elf;
    // The architecture, its `e_flags` (the ABI the core requires) and its relocations for an
    // absolute 64-bit and a PC-relative 32-bit datum.
    let (architecture, e_flags, absolute, relative) = match arch {
        Arch::X86_64 => (
            Architecture::X86_64,
            0,
            elf::R_X86_64_64,
            elf::R_X86_64_PC32,
        ),
        Arch::Aarch64 => (
            Architecture::Aarch64,
            0,
            elf::R_AARCH64_ABS64,
            elf::R_AARCH64_PREL32,
        ),
        Arch::Riscv64 => (
            Architecture::Riscv64,
            elfjit_core::arch::riscv64::REQUIRED_FLOAT_ABI.0,
            elf::R_RISCV_64,
            elf::R_RISCV_32_PCREL,
        ),
        Arch::Loongarch64 => (
            Architecture::LoongArch64,
            elfjit_core::arch::loongarch64::REQUIRED_BASE_ABI.0,
            elf::R_LARCH_64,
            elf::R_LARCH_32_PCREL,
        ),
        // ELFv2, as clang writes for ppc64le.
        Arch::Ppc64le => (
            Architecture::PowerPc64,
            2,
            elf::R_PPC64_ADDR64,
            elf::R_PPC64_REL32,
        ),
    };
    let mut obj = Object::new(BinaryFormat::Elf, architecture, Endianness::Little);
    obj.flags = FileFlags::Elf {
        os_abi: object::elf::ELFOSABI_NONE,
        abi_version: 0,
        e_flags: object::elf::FileFlags(e_flags),
    };
    let text = obj.add_section(Vec::new(), b".text".to_vec(), SectionKind::Text);
    let rodata = obj.add_section(Vec::new(), b".rodata".to_vec(), SectionKind::ReadOnlyData);
    let data = obj.add_section(Vec::new(), b".data".to_vec(), SectionKind::Data);
    let bss = obj.add_section(Vec::new(), b".bss".to_vec(), SectionKind::UninitializedData);
    let code = obj.append_section_data(text, &[0; 32], 16);
    let table = obj.append_section_data(rodata, &[0; 64], 16);
    let pointers = obj.append_section_data(data, &[0; 16], 8);
    let counter = obj.append_section_bss(bss, 4, 4);
    let mut define = |name: &str, value, size, kind, scope, section| {
        obj.add_symbol(Symbol {
            name: name.as_bytes().to_vec(),
            value,
            size,
            kind,
            scope,
            weak: false,
            section: SymbolSection::Section(section),
            flags: SymbolFlags::None,
        })
    };
    define(
        "elfjit_warmup",
        code,
        32,
        SymbolKind::Text,
        SymbolScope::Dynamic,
        text,
    );
    let table = define(
        "table",
        table,
        64,
        SymbolKind::Data,
        SymbolScope::Compilation,
        rodata,
    );
    define(
        "elfjit_warmup_calls",
        counter,
        4,
        SymbolKind::Data,
        SymbolScope::Dynamic,
        bss,
    );
    let external = obj.add_symbol(Symbol {
        name: EXTERNAL.as_bytes().to_vec(),
        value: 0,
        size: 0,
        kind: SymbolKind::Unknown,
        scope: SymbolScope::Unknown,
        weak: false,
        section: SymbolSection::Undefined,
        flags: SymbolFlags::None,
    });
    let relocations = [
        // The code's reference to its table (x86_64's PC32 is exactly this).
        (text, code + 4, table, relative),
        (data, pointers, table, absolute),
        (data, pointers + 8, external, absolute),
    ];
    for (section, offset, symbol, r_type) in relocations {
        obj.add_relocation(
            section,
            Relocation {
                offset,
                symbol,
                addend: 0,
                flags: RelocationFlags::Elf { r_type },
            },
        )
        .ok()?;
    }
    obj.write().ok()
}

/// The warm-up object's resolver: [`EXTERNAL`] is an address (its own, never called), any
/// other name nothing.
pub(crate) fn resolve(name: &str) -> Option<u64> {
    (name == EXTERNAL).then_some(resolve as *const () as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfjit_core::{Plan, SliceBackend};

    /// The object plans and links for every architecture (its relocations are in each
    /// one's table, its flags pass each one's ABI check), with the values each relocation
    /// should produce, and defines the two globals.
    #[test]
    fn links_for_every_architecture() {
        for arch in [
            Arch::X86_64,
            Arch::Aarch64,
            Arch::Riscv64,
            Arch::Loongarch64,
            Arch::Ppc64le,
        ] {
            let object = object(arch).expect("written");
            let plan = Plan::new(&[&object], 4096).unwrap_or_else(|e| panic!("{arch}: {e}"));
            assert_eq!(plan.arch(), arch);
            assert_eq!(plan.relocation_count(), 3, "{arch}");
            let mut buffer = vec![0u8; plan.image_size() as usize];
            let base = 0x7f00_0000_0000u64;
            let mut backend = SliceBackend::new(&mut buffer, base, 4096);
            let mut resolver = |name: &[u8]| std::str::from_utf8(name).ok().and_then(resolve);
            let image = plan
                .link(&mut backend, &mut resolver)
                .unwrap_or_else(|e| panic!("{arch}: {e}"));
            let globals: Vec<_> = image.globals().map(|g| g.name.to_vec()).collect();
            assert_eq!(
                globals,
                [b"elfjit_warmup".to_vec(), b"elfjit_warmup_calls".to_vec()],
                "{arch}"
            );
            let parsed = elfjit_core::elf::Object::parse(&object).expect("parse");
            let section = |name: &[u8]| {
                let index = (0..parsed.section_count())
                    .find(|&i| parsed.section_name(i).as_bytes() == name)
                    .unwrap_or_else(|| panic!("no section {}", name.escape_ascii()));
                image.section_address(0, index).expect("placed")
            };
            let (data, table) = (section(b".data"), section(b".rodata"));
            let code = image.symbol("elfjit_warmup").expect("code");
            drop(image);
            let read = |at: u64, n: usize| {
                let i = (at - base) as usize;
                let mut word = [0u8; 8];
                word[..n].copy_from_slice(&buffer[i..i + n]);
                u64::from_le_bytes(word)
            };
            assert_eq!(read(data, 8), table, "{arch}: pointer to the table");
            assert_eq!(read(data + 8, 8), resolve(EXTERNAL).unwrap(), "{arch}");
            let pc_relative = table.wrapping_sub(code + 4) as u32;
            assert_eq!(read(code + 4, 4) as u32, pc_relative, "{arch}: PC-relative");
        }
    }
}
