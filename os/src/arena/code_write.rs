//! Staged code: how the arena writes code where the OS gives per-thread JIT memory
//! ([`PerThreadJit`], macOS on arm64) instead of pages it protects in place.
//!
//! There each thread sees the code region either writable or executable. A thread that
//! switched to writing and then called any code in the region (its own earlier modules,
//! another load's) would fault, and the linker's writes happen wherever the caller keeps
//! the backend. So the linker never writes the pages: it writes a zeroed heap buffer per
//! module (`ArenaBackend::segment_mut` of the code segment), and publishing copies the
//! buffers into their pages inside one [`WriteBracket`] on the publishing thread, filling
//! the rest of each module's pages with zeros (so freed code pages need not read as zero).
//! Inside the bracket nothing runs but the copies (no module code, no caller code, nothing
//! that panics); the bracket is ended on every path out, unwinding included, and the
//! instruction cache is flushed after it ends.
//!
//! When the OS refuses such memory (on macOS the hardened runtime without the
//! `com.apple.security.cs.allow-jit` entitlement: `mmap(MAP_JIT)` fails with `EPERM` or
//! `EINVAL`), the load fails with [`ArenaError::JitUnavailable`] naming the call and the
//! entitlement ([`refused`]); no other scheme is tried, since every process the OS lets
//! protect anonymous pages executable in place is also let map `MAP_JIT` memory
//! (docs/os-support.md).
//!
//! This logic is the same on every OS and is tested on Linux with a [`PerThreadJit`] made
//! of `mprotect` calls (read/write, then read/execute) over the bracket's pages. The arena
//! and `MmapBackend` both write code through it.

use super::classify::classify;
use super::error::ArenaError;
use super::sys;
use super::sys_api::PerThreadJit;

/// The error for a refused `step` of making per-thread JIT memory (one of the OS's
/// [`PerThreadJit::reserve_step`] / [`PerThreadJit::open_step`]) of `size` bytes: a limit
/// reached is that limit ([`classify`]); any other errno is the OS not giving this process
/// such memory.
pub(crate) fn refused(step: &'static str, size: u64, errno: i32) -> ArenaError {
    if sys::is_out_of_memory(errno) {
        classify(step, size, errno)
    } else {
        ArenaError::JitUnavailable { step, errno }
    }
}

/// The stretch in which the calling thread sees some code pages writable: opened over
/// `ranges` by [`WriteBracket::open`], ended by [`WriteBracket::close`] or, on any other
/// way out, by dropping it.
pub(crate) struct WriteBracket<'a> {
    jit: &'a PerThreadJit,
    ranges: &'a [(usize, usize)],
    /// How many of `ranges` were opened (all of them, unless opening one failed).
    opened: usize,
}

impl<'a> WriteBracket<'a> {
    /// Makes `ranges` writable for this thread. On failure the ones already opened are
    /// ended again, and the error is the failed range's length and the errno.
    ///
    /// # Safety
    /// The ranges are code pages of the arena that the caller owns (an allocation being
    /// published); until the bracket ends this thread runs no code from them or from any
    /// other per-thread JIT memory.
    pub(crate) unsafe fn open(
        jit: &'a PerThreadJit,
        ranges: &'a [(usize, usize)],
    ) -> Result<WriteBracket<'a>, (usize, i32)> {
        let mut bracket = WriteBracket {
            jit,
            ranges,
            opened: 0,
        };
        for &(addr, len) in ranges {
            // SAFETY: the caller's contract.
            unsafe { (jit.begin_write)(addr, len) }.map_err(|e| (len, e))?;
            bracket.opened += 1;
        }
        Ok(bracket)
    }

    /// Ends the bracket: the ranges are executable again for this thread. The first
    /// failure, as the range's length and the errno (the others are still ended).
    pub(crate) fn close(mut self) -> Result<(), (usize, i32)> {
        self.end()
    }

    fn end(&mut self) -> Result<(), (usize, i32)> {
        let mut result = Ok(());
        for &(addr, len) in self.ranges.iter().take(self.opened) {
            // SAFETY: the ranges `open` made writable; the bracket's owner holds no
            // reference into them past this call (`close` consumes the bracket, `drop`
            // ends it).
            if let Err(e) = unsafe { (self.jit.end_write)(addr, len) } {
                result = result.and(Err((len, e)));
            }
        }
        self.opened = 0;
        result
    }
}

impl Drop for WriteBracket<'_> {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

/// One module's staged code: its pages at `dst` (`held` bytes) and the bytes to put there.
pub(crate) struct Staged<'a> {
    pub dst: usize,
    pub held: usize,
    pub bytes: &'a [u8],
}

/// Copies each module's staged code into its pages and zeroes the rest of them, inside one
/// bracket over `ranges` (the modules' pages, coalesced). The caller flushes the
/// instruction cache afterwards. On failure, the length and errno of the range whose
/// opening or ending failed.
///
/// # Safety
/// Every `dst..dst + held` lies in `ranges`, is code memory the caller owns and nothing else
/// reads or writes meanwhile, and `bytes.len() <= held`; [`WriteBracket::open`]'s contract
/// holds for `ranges`.
pub(crate) unsafe fn commit(
    jit: &PerThreadJit,
    ranges: &[(usize, usize)],
    modules: &[Staged<'_>],
) -> Result<(), (usize, i32)> {
    // SAFETY: the caller's contract.
    let bracket = unsafe { WriteBracket::open(jit, ranges) }?;
    for m in modules {
        let len = m.bytes.len().min(m.held);
        // SAFETY: `[dst, dst + held)` is the caller's, writable for this thread inside the
        // bracket; the buffer is a separate heap allocation (no overlap).
        unsafe {
            std::ptr::copy_nonoverlapping(m.bytes.as_ptr(), m.dst as *mut u8, len);
            std::ptr::write_bytes((m.dst + len) as *mut u8, 0, m.held - len);
        }
    }
    bracket.close()
}

/// A [`PerThreadJit`] made of `mprotect` calls over each range (read/write while written,
/// read/execute otherwise): the staged scheme's stand-in on Linux, for its tests.
#[cfg(all(test, target_os = "linux"))]
pub(crate) mod by_mprotect {
    use super::super::sys;
    use super::super::sys_api::{PerThreadJit, Prot};

    unsafe fn read_execute(addr: usize, len: usize) -> Result<(), i32> {
        // SAFETY: the callers' contracts (the arena's own code pages).
        unsafe { sys::protect(addr, len, Prot::ReadExecute) }
    }

    unsafe fn read_write(addr: usize, len: usize) -> Result<(), i32> {
        // SAFETY: as above.
        unsafe { sys::protect(addr, len, Prot::ReadWrite) }
    }

    unsafe fn discard(addr: usize, len: usize) -> Result<(), i32> {
        // SAFETY: as above; nothing needs the contents. (Not `sys::release`, which records
        // a release for the release probe that `arena::tests` counts.)
        unsafe { super::super::sys_posix::madvise(addr, len, libc::MADV_DONTNEED) }
    }

    pub(crate) const JIT: PerThreadJit = PerThreadJit {
        open_region: read_execute,
        begin_write: read_write,
        end_write: read_execute,
        discard,
        reserve_step: "reserve code memory (the Linux stand-in: mmap)",
        open_step: "make code memory read/execute (the Linux stand-in: mprotect)",
    };
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::test_maps::permissions;

    fn code_page() -> (usize, usize) {
        let page = super::super::sys::page_size();
        let base = super::super::sys::reserve(page).expect("reserve");
        // SAFETY: the page just reserved, which nothing uses.
        unsafe { (by_mprotect::JIT.open_region)(base, page) }.expect("open");
        (base, page)
    }

    /// A refusal is the OS's step and errno; running out of memory stays a limit reached.
    #[test]
    fn a_refusal_names_the_step_and_a_limit_stays_a_limit() {
        let step = by_mprotect::JIT.reserve_step;
        for errno in [libc::EPERM, libc::EINVAL, libc::EACCES, libc::ENOTSUP] {
            let e = refused(step, 4096, errno);
            assert_eq!(e, ArenaError::JitUnavailable { step, errno });
            let text = e.to_string();
            assert!(text.contains(step), "{text}");
            let backend = elfjit_core::BackendError::from(e);
            assert_eq!((backend.op, backend.code), (step, errno));
        }
        assert!(matches!(
            refused(step, 4096, libc::ENOMEM),
            ArenaError::Exhausted {
                errno: libc::ENOMEM,
                requested: 4096,
                ..
            }
        ));
    }

    /// Makes [`refused_child`] a child.
    #[cfg(target_arch = "x86_64")]
    const REFUSE_EXEC: &str = "ELFJIT_TEST_REFUSE_EXEC";

    /// The kernel refusing executable memory for real (a seccomp filter in a child fails
    /// every `mprotect` asking for `PROT_EXEC` with `EPERM`, as XNU refuses `MAP_JIT`
    /// without the entitlement): an arena and an `MmapBackend` whose code is per-thread JIT
    /// memory (the stand-in) fail the load with the OS's step and errno, nothing left
    /// mapped by the backend. Native x86_64 only (qemu-user refuses seccomp).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_refused_jit_fails_the_load_naming_the_step() {
        let name = "arena::code_write::tests::refused_child";
        let out = crate::test_seccomp::run_child(name, REFUSE_EXEC, "1");
        assert!(out.contains("both refused"), "{out}");
    }

    /// The child of [`a_refused_jit_fails_the_load_naming_the_step`].
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[ignore = "a child process of a_refused_jit_fails_the_load_naming_the_step"]
    fn refused_child() {
        use crate::test_seccomp::{install, jump_unless, load_word, stmt};
        use elfjit_core::{Layout, MemoryBackend, SegmentRequest};
        std::env::var(REFUSE_EXEC).expect("run by its parent test, which sets it");
        let exec_bit = libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::PROT_EXEC as u32,
        };
        install(vec![
            load_word(0),
            jump_unless(libc::SYS_mprotect as u32, 3),
            load_word(32), // args[2], the protection
            exec_bit,
            stmt(
                libc::BPF_RET | libc::BPF_K,
                libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
            ),
            stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        ]);
        let request = SegmentRequest {
            size: 16,
            align: 16,
        };
        let layout = Layout::new([request; 3]);
        let step = by_mprotect::JIT.open_step;
        let refusal = ArenaError::JitUnavailable {
            step,
            errno: libc::EPERM,
        };
        let arena = super::super::Arena::build_with(
            super::super::ArenaConfig::default(),
            Some(by_mprotect::JIT),
        );
        let mut b = arena.backend();
        let err = b.allocate(&layout).expect_err("refused");
        assert_eq!(b.error(), Some(&refusal), "{err}");
        let mut m = crate::MmapBackend::with_jit(Some(by_mprotect::JIT));
        let err = m.allocate(&layout).expect_err("refused");
        assert_eq!((err.op, err.code), (step, libc::EPERM), "{err}");
        assert_eq!(m.region(), None);
        println!("both refused: {refusal}");
    }

    /// Inside the bracket the pages are writable (and not executable); after it, and
    /// after a panic inside it, executable and not writable.
    #[test]
    fn the_bracket_ends_on_every_way_out() {
        let (base, page) = code_page();
        let ranges = [(base, page)];
        assert_eq!(permissions(base), "r-x");
        // SAFETY: our own page; nothing runs from it.
        let bracket = unsafe { WriteBracket::open(&by_mprotect::JIT, &ranges) }.expect("open");
        assert_eq!(permissions(base), "rw-");
        bracket.close().expect("close");
        assert_eq!(permissions(base), "r-x");
        let unwound = std::panic::catch_unwind(|| {
            // SAFETY: as above.
            let _bracket = unsafe { WriteBracket::open(&by_mprotect::JIT, &ranges) };
            assert_eq!(permissions(base), "rw-");
            panic!("a failure inside the bracket");
        });
        assert!(unwound.is_err());
        assert_eq!(permissions(base), "r-x", "ended while unwinding");
        // SAFETY: our own reservation, unused.
        unsafe { super::super::sys::unmap(base, page) };
    }

    /// Opening a range that is not mapped fails, and the ranges opened before it are
    /// ended again.
    #[test]
    fn a_failed_open_ends_what_it_opened() {
        let page = super::super::sys::page_size();
        let base = super::super::sys::reserve(2 * page).expect("reserve");
        // SAFETY: the reservation just made, which nothing uses: its first page opened,
        // its second given back (so mprotect refuses it).
        unsafe {
            (by_mprotect::JIT.open_region)(base, page).expect("open");
            super::super::sys::unmap(base + page, page);
        }
        let ranges = [(base, page), (base + page, page)];
        // SAFETY: the first range is ours, the second unmapped; nothing runs from either.
        let err = unsafe { WriteBracket::open(&by_mprotect::JIT, &ranges) }.err();
        assert_eq!(err, Some((page, libc::ENOMEM)));
        assert_eq!(permissions(base), "r-x", "the first range ended again");
        // SAFETY: our own page, unused.
        unsafe { super::super::sys::unmap(base, page) };
    }

    /// Each module's bytes land at its pages and the rest of them read zero, however dirty
    /// they were; the pages end executable.
    #[test]
    fn commit_copies_and_zeroes_the_rest_of_each_module() {
        let (base, page) = code_page();
        let ranges = [(base, page)];
        let half = page / 2;
        let dirty = vec![0xa5u8; half];
        let staged = |bytes| {
            [
                Staged {
                    dst: base,
                    held: half,
                    bytes,
                },
                Staged {
                    dst: base + half,
                    held: half,
                    bytes: &[1, 2, 3][..],
                },
            ]
        };
        // SAFETY: our own page; nothing runs from it.
        unsafe { commit(&by_mprotect::JIT, &ranges, &staged(&dirty)) }.expect("commit");
        // SAFETY: as above.
        unsafe { commit(&by_mprotect::JIT, &ranges, &staged(&[9, 9][..])) }.expect("commit");
        // SAFETY: the page is mapped readable.
        let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, page) };
        assert_eq!(&bytes[..3], [9, 9, 0]);
        assert!(
            bytes[2..half].iter().all(|&b| b == 0),
            "the old bytes are gone"
        );
        assert_eq!(&bytes[half..half + 4], [1, 2, 3, 0]);
        assert_eq!(permissions(base), "r-x");
        // SAFETY: our own reservation, unused.
        unsafe { super::super::sys::unmap(base, page) };
    }
}
