//! The few Linux system calls the program needs, made directly (`syscall 0`, number in
//! `$a7`, arguments in `$a0`..`$a5`, result in `$a0`), the process entry point, and a
//! buffered writer for standard output.

use core::arch::{asm, global_asm};
use core::fmt;

const SYS_WRITE: usize = 64;
const SYS_EXIT_GROUP: usize = 94;
const SYS_MUNMAP: usize = 215;
const SYS_MMAP: usize = 222;
const SYS_MPROTECT: usize = 226;

pub const PROT_READ: usize = 1;
pub const PROT_WRITE: usize = 2;
pub const PROT_EXEC: usize = 4;
const MAP_PRIVATE: usize = 0x02;
const MAP_ANONYMOUS: usize = 0x20;

/// A raw system call. Returns the kernel's result: a negative errno on failure.
///
/// # Safety
/// The arguments must be valid for system call `n` (pointers to memory it may use).
unsafe fn syscall(n: usize, a: [usize; 6]) -> isize {
    let ret: isize;
    asm!(
        "syscall 0",
        inlateout("$a0") a[0] => ret,
        in("$a1") a[1], in("$a2") a[2], in("$a3") a[3], in("$a4") a[4], in("$a5") a[5],
        in("$a7") n,
        // The kernel may clobber the temporaries.
        lateout("$t0") _, lateout("$t1") _, lateout("$t2") _, lateout("$t3") _,
        lateout("$t4") _, lateout("$t5") _, lateout("$t6") _, lateout("$t7") _,
        lateout("$t8") _,
        options(nostack),
    );
    ret
}

/// `Ok(value)` or `Err(errno)`.
fn result(ret: isize) -> Result<usize, i32> {
    if (-4095..0).contains(&ret) {
        Err(-ret as i32)
    } else {
        Ok(ret as usize)
    }
}

/// Maps `len` bytes of fresh, zeroed, read/write memory.
pub fn mmap_anonymous(len: usize) -> Result<usize, i32> {
    let flags = MAP_PRIVATE | MAP_ANONYMOUS;
    // SAFETY: an anonymous mapping at an address the kernel picks touches no existing memory.
    result(unsafe {
        syscall(
            SYS_MMAP,
            [0, len, PROT_READ | PROT_WRITE, flags, usize::MAX, 0],
        )
    })
}

/// Changes the protection of `[addr, addr + len)`, which this program mapped.
pub fn mprotect(addr: usize, len: usize, prot: usize) -> Result<(), i32> {
    // SAFETY: only pages this program mapped for its images are passed here.
    result(unsafe { syscall(SYS_MPROTECT, [addr, len, prot, 0, 0, 0]) }).map(|_| ())
}

/// Unmaps `[addr, addr + len)`.
///
/// # Safety
/// Nothing may use the range afterwards.
pub unsafe fn munmap(addr: usize, len: usize) {
    syscall(SYS_MUNMAP, [addr, len, 0, 0, 0, 0]);
}

/// Makes stores to code visible to instruction fetch (`ibar 0`).
pub fn flush_icache() {
    // SAFETY: `ibar` orders instruction fetch after earlier stores; nothing else.
    unsafe { asm!("ibar 0", options(nostack, preserves_flags)) };
}

pub fn exit(code: i32) -> ! {
    loop {
        // SAFETY: exit_group ends the process; it does not return.
        unsafe { syscall(SYS_EXIT_GROUP, [code as usize, 0, 0, 0, 0, 0]) };
    }
}

fn write_all(fd: usize, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for reads of its length.
        match result(unsafe {
            syscall(
                SYS_WRITE,
                [fd, bytes.as_ptr() as usize, bytes.len(), 0, 0, 0],
            )
        }) {
            Ok(n) => bytes = &bytes[n.min(bytes.len())..],
            Err(4) => {}      // EINTR: try again
            Err(_) => return, // nowhere to report it
        }
    }
}

/// Standard output with a small buffer, written out when full and by `flush`.
pub struct Stdout {
    buf: [u8; 1024],
    len: usize,
}

impl Stdout {
    pub const fn new() -> Stdout {
        Stdout {
            buf: [0; 1024],
            len: 0,
        }
    }

    pub fn flush(&mut self) {
        write_all(1, &self.buf[..self.len]);
        self.len = 0;
    }
}

impl fmt::Write for Stdout {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &b in s.as_bytes() {
            if self.len == self.buf.len() {
                self.flush();
            }
            self.buf[self.len] = b;
            self.len += 1;
        }
        Ok(())
    }
}

// The entry point: Linux starts the process with `$sp` at argc, then argv, envp and the
// auxiliary vector. Hand that pointer to Rust.
global_asm!(
    ".globl _start",
    "_start:",
    "move $a0, $sp",
    "bl {start}",
    start = sym start,
);

const AT_NULL: usize = 0;
const AT_PAGESZ: usize = 6;

/// Reads the page size from the auxiliary vector, runs the program and exits with its
/// status.
extern "C" fn start(sp: *const usize) -> ! {
    // SAFETY: the kernel laid out argc, argv[], NULL, envp[], NULL, auxv pairs at `sp`.
    let page_size = unsafe {
        let argc = *sp;
        let mut p = sp.add(1 + argc + 1); // past argv and its NULL
        while *p != 0 {
            p = p.add(1); // envp
        }
        p = p.add(1);
        let mut page_size = 0;
        while *p != AT_NULL {
            if *p == AT_PAGESZ {
                page_size = *p.add(1);
            }
            p = p.add(2);
        }
        page_size
    };
    exit(crate::main(if page_size == 0 {
        16384
    } else {
        page_size as u64
    }))
}
