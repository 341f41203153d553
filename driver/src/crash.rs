//! Saying what happened when a kernel called natively crashes the process.
//!
//! A native kernel runs in elfjit's own process, so a bad pointer in it kills the process.
//! The `elfjit` CLI calls [`install`] once at start-up: then a fatal signal (SIGSEGV,
//! SIGBUS, SIGILL, SIGFPE, SIGTRAP) prints one line on stderr naming the signal, the
//! kernel being called (set by [`calling`] around each call), the fault address and the
//! program counter, each relative to the module when it lies inside it, and the process
//! then dies of that signal as it would have (so the exit status, and a core dump if
//! enabled, are unchanged). A library embedding elfjit keeps its own signal handling:
//! nothing is installed unless asked.
//!
//! The handler is async-signal-safe: it allocates nothing, takes no lock, formats into a
//! buffer on its (alternate) stack and calls only `write(2)`, `sigaction(2)` and
//! `raise(3)`. The kernel's name and the module's range are published through atomics
//! before the call.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

const NAME_CAP: usize = 120;
static NAME: [AtomicU8; NAME_CAP] = [const { AtomicU8::new(0) }; NAME_CAP];
static NAME_LEN: AtomicUsize = AtomicUsize::new(0);
static IN_CALL: AtomicBool = AtomicBool::new(false);
static MODULE_START: AtomicUsize = AtomicUsize::new(0);
static MODULE_LEN: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

const SIGNALS: [(libc::c_int, &str); 5] = [
    (libc::SIGSEGV, "SIGSEGV (invalid memory access)"),
    (libc::SIGBUS, "SIGBUS (bus error)"),
    (libc::SIGILL, "SIGILL (illegal instruction)"),
    (libc::SIGFPE, "SIGFPE (arithmetic exception)"),
    (libc::SIGTRAP, "SIGTRAP (trap)"),
];

/// While alive, a crash is reported as a crash of kernel `name` in the module at
/// `region` (start, length).
#[must_use = "the kernel is named only while the guard lives"]
pub struct Calling(());

/// Names the kernel about to be called natively and its module's address range.
pub fn calling(name: &str, region: (usize, usize)) -> Calling {
    let bytes = name.as_bytes();
    let n = bytes.len().min(NAME_CAP);
    for (slot, b) in NAME.iter().zip(bytes.iter().take(n)) {
        slot.store(*b, Ordering::Relaxed);
    }
    NAME_LEN.store(n, Ordering::Relaxed);
    MODULE_START.store(region.0, Ordering::Relaxed);
    MODULE_LEN.store(region.1, Ordering::Relaxed);
    IN_CALL.store(true, Ordering::Release);
    Calling(())
}

impl Drop for Calling {
    fn drop(&mut self) {
        IN_CALL.store(false, Ordering::Release);
    }
}

/// Installs the reporter for this process (idempotent). Fails only if the system refuses
/// a signal action or the alternate stack.
pub fn install() -> std::io::Result<()> {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    ensure_alternate_stack()?;
    for (sig, _) in SIGNALS {
        // SAFETY: `sigaction` is given a fully initialised action whose handler is an
        // `extern "C"` function of the SA_SIGINFO signature; the handler itself is
        // async-signal-safe (see the module documentation).
        let r = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as Handler as usize;
            // Reset to the default on entry and do not block the signal, so re-raising
            // it from the handler kills the process with it.
            action.sa_flags =
                libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESETHAND | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut())
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The handler needs a stack that works when the kernel has wrecked its own (a stack
/// overflow). Rust's runtime gives the main thread one; make sure there is one.
fn ensure_alternate_stack() -> std::io::Result<()> {
    const SIZE: usize = 64 * 1024;
    // SAFETY: stack_t is plain data (all-zero is a valid value), and sigaltstack with a
    // null new stack only writes the current one into `old`.
    let (r, old) = unsafe {
        let mut old: libc::stack_t = std::mem::zeroed();
        (libc::sigaltstack(std::ptr::null(), &mut old), old)
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if old.ss_flags & libc::SS_DISABLE == 0 && old.ss_size >= libc::MINSIGSTKSZ {
        return Ok(());
    }
    // A stack for the life of the process: leaked on purpose.
    let stack: &'static mut [u8] = Box::leak(vec![0u8; SIZE].into_boxed_slice());
    let new = libc::stack_t {
        ss_sp: stack.as_mut_ptr().cast(),
        ss_flags: 0,
        ss_size: SIZE,
    };
    // SAFETY: `new` describes memory that stays valid for the rest of the process.
    if unsafe { libc::sigaltstack(&new, std::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A fixed buffer the handler formats into (no allocation).
struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    fn push(&mut self, bytes: &[u8]) {
        for b in bytes {
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = *b;
                self.len += 1;
            }
        }
    }

    fn hex(&mut self, v: usize) {
        let mut digits = [0u8; 16];
        let mut n = 0;
        let mut rest = v;
        loop {
            if let Some(d) = digits.get_mut(n) {
                *d = b"0123456789abcdef"[rest & 15];
            }
            n += 1;
            rest >>= 4;
            if rest == 0 || n == digits.len() {
                break;
            }
        }
        self.push(b"0x");
        for i in (0..n).rev() {
            if let Some(d) = digits.get(i) {
                self.push(&[*d]);
            }
        }
    }

    /// `module+0xOFF` inside the module, else the absolute address.
    fn address(&mut self, a: usize, start: usize, len: usize) {
        if len > 0 && a >= start && a - start < len {
            self.push(b"module+");
            self.hex(a - start);
        } else {
            self.hex(a);
        }
    }
}

type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let mut line = Line {
        buf: [0; 512],
        len: 0,
    };
    let in_call = IN_CALL.load(Ordering::Acquire);
    let (start, len) = (
        MODULE_START.load(Ordering::Relaxed),
        MODULE_LEN.load(Ordering::Relaxed),
    );
    line.push(b"elfjit: error: ");
    if in_call {
        line.push(b"the kernel `");
        let n = NAME_LEN.load(Ordering::Relaxed).min(NAME_CAP);
        for slot in NAME.iter().take(n) {
            line.push(&[slot.load(Ordering::Relaxed)]);
        }
        line.push(b"` crashed: ");
    } else {
        line.push(b"elfjit crashed: ");
    }
    let name = SIGNALS
        .iter()
        .find(|(s, _)| *s == sig)
        .map_or("a fatal signal", |(_, n)| n);
    line.push(name.as_bytes());
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler; si_addr is
    // meaningful for the fault signals handled here.
    let fault = unsafe { info.as_ref().map(|i| i.si_addr() as usize) };
    if let Some(addr) = fault {
        line.push(b" at address ");
        line.address(addr, start, len);
    }
    if let Some(pc) = program_counter(context) {
        line.push(b", pc ");
        line.address(pc, start, len);
    }
    if in_call && len > 0 {
        line.push(b" (the module is ");
        line.hex(start);
        line.push(b"..");
        line.hex(start.wrapping_add(len));
        line.push(b")");
    }
    line.push(b"\n");
    let bytes = line.buf.get(..line.len).unwrap_or_default();
    // SAFETY: write(2) and raise(3) are async-signal-safe; the buffer is valid for
    // `len` bytes. SA_RESETHAND restored the default action, so raising the signal ends
    // the process with it (a fault would recur on return anyway).
    unsafe {
        libc::write(2, bytes.as_ptr().cast(), bytes.len());
        libc::raise(sig);
        libc::_exit(128 + sig);
    }
}

/// The interrupted program counter, where the platform's context layout is known.
fn program_counter(context: *mut libc::c_void) -> Option<usize> {
    if context.is_null() {
        return None;
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        // SAFETY: for an SA_SIGINFO handler the third argument is the ucontext_t of the
        // interrupted code.
        let uc = unsafe { &*context.cast::<libc::ucontext_t>() };
        let rip = uc.uc_mcontext.gregs.get(libc::REG_RIP as usize).copied()?;
        Some(rip as usize)
    }
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    {
        // SAFETY: as above.
        let uc = unsafe { &*context.cast::<libc::ucontext_t>() };
        Some(uc.uc_mcontext.pc as usize)
    }
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_format_addresses_without_allocating() {
        let mut l = Line {
            buf: [0; 512],
            len: 0,
        };
        l.address(0x1010, 0x1000, 0x100);
        l.push(b" ");
        l.address(0x10, 0x1000, 0x100);
        l.push(b" ");
        l.hex(0);
        l.push(b" ");
        l.hex(usize::MAX);
        assert_eq!(
            std::str::from_utf8(&l.buf[..l.len]).unwrap(),
            "module+0x10 0x10 0x0 0xffffffffffffffff"
        );
        // A line never overflows its buffer.
        for _ in 0..100 {
            l.push(b"0123456789");
        }
        assert_eq!(l.len, 512);
    }

    #[test]
    fn the_call_guard_publishes_and_clears_the_name() {
        {
            let _g = calling("kernel_name", (0x1000, 0x2000));
            assert!(IN_CALL.load(Ordering::Acquire));
            assert_eq!(NAME_LEN.load(Ordering::Relaxed), 11);
        }
        assert!(!IN_CALL.load(Ordering::Acquire));
    }
}
