/* Preloaded (LD_PRELOAD) into the riscv64 child of os/tests/cross_thread.rs. qemu-riscv64
 * completes riscv_flush_icache itself, in its CPU loop before its system-call layer (so
 * neither the host's strace nor qemu's -strace sees it): this library logs the process's
 * own calls instead, each syscall(259, start, end, flags) and the getppid() marker, to the
 * file $ELFJIT_TEST_SYSCALL_LOG, then makes them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

/* __NR_riscv_flush_icache: the arch-specific base 244, + 15. */
#define RISCV_FLUSH_ICACHE 259

static long (*next_syscall)(long, ...);
static pid_t (*next_getppid)(void);

__attribute__((constructor)) static void find_next(void) {
    next_syscall = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    next_getppid = (pid_t(*)(void))dlsym(RTLD_NEXT, "getppid");
}

static void log_line(const char *format, ...) {
    const char *path = getenv("ELFJIT_TEST_SYSCALL_LOG");
    if (!path) return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return;
    va_list args;
    va_start(args, format);
    vdprintf(fd, format, args);
    va_end(args);
    close(fd);
}

long syscall(long number, ...) {
    /* Six arguments whatever the call, as glibc's own syscall() takes them: on riscv64
     * they are registers a1-a6, read whether set or not. */
    va_list args;
    long a[6];
    va_start(args, number);
    for (int i = 0; i < 6; i++) a[i] = va_arg(args, long);
    va_end(args);
    if (number == RISCV_FLUSH_ICACHE)
        log_line("riscv_flush_icache(%#lx, %#lx, %ld)\n", a[0], a[1], a[2]);
    return next_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

pid_t getppid(void) {
    log_line("getppid()\n");
    return next_getppid();
}
