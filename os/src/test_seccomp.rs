//! Tests only (Linux x86_64, natively: qemu-user refuses seccomp): makes the kernel refuse
//! a system call through a seccomp filter, so that a test sees a real refusal, and runs a
//! test of this binary as a child process to install it in (a filter cannot be removed).

/// A filter statement.
pub(crate) fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

/// Goes on if the accumulator equals `k`, else skips `skip` statements.
pub(crate) fn jump_unless(k: u32, skip: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt: 0,
        jf: skip,
        k,
    }
}

/// Loads the 32-bit word at `offset` of `seccomp_data` (nr at 0, args[i]'s low half at
/// 16 + 8 * i on little-endian x86_64).
pub(crate) fn load_word(offset: u32) -> libc::sock_filter {
    stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset)
}

/// Installs `program` on this process (and its future threads), for good.
pub(crate) fn install(mut program: Vec<libc::sock_filter>) {
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only.
    let r = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(r, 0, "no_new_privs: {}", std::io::Error::last_os_error());
    // SAFETY: `fprog` points at `program`, alive for the call; the kernel copies it.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const libc::sock_fprog,
        )
    };
    assert_eq!(r, 0, "seccomp: {}", std::io::Error::last_os_error());
}

/// Runs the ignored test `name` (its full path) in a new process of this test binary with
/// `var` set to `value`, and returns what it printed; it must succeed.
pub(crate) fn run_child(name: &str, var: &str, value: &str) -> String {
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(var, value)
        .output()
        .expect("start the child");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {name} with {var}={value}: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}
