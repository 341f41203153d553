/*
 * runner.c: elfjit's emulated runner, a static freestanding program run under qemu-user.
 *
 * The driver links a kernel and a generated call shim into one image on the host, at a
 * fixed target address, and sends it here over stdin. This program maps the image at
 * that address, protects its segments (never writable and executable at once), flushes
 * the instruction cache, maps the argument buffers, calls the shim, times the call, and
 * answers on stdout. It has no libc: its own _start, raw system calls, and support.c for
 * everything the kernel may call (memcpy, libm, compiler-rt helpers).
 *
 * Wire format (little-endian, every field a 64-bit word; see emulate/protocol.rs):
 *
 *   request  = magic, image_base, image_size,
 *              code_offset, code_size, rodata_offset, rodata_size, data_offset, data_size,
 *              shim, args_size, buffers_base, buffers_size
 *              then image_size bytes of image, args_size bytes of argument block,
 *              buffers_size bytes of buffer contents
 *   reply    = magic, return value (8 bytes), call time in nanoseconds,
 *              then buffers_size bytes of buffer contents after the call
 *
 * Failures print one line "elfjit-runner: ..." on stderr and exit with a non-zero status.
 */

#include <stddef.h>
#include <stdint.h>

#define REQUEST_MAGIC 0x3152514a4c45ULL /* "ELJQR1" */
#define REPLY_MAGIC 0x3150524a4c45ULL   /* "ELJRP1" */
#define MAX_ARGS_SIZE 4096

void __clear_cache(void *begin, void *end); /* support.c */
void *memcpy(void *restrict dst, const void *restrict src, size_t n);

/* ---------------------------------------------------------------------------------- */
/* System calls                                                                        */
/* ---------------------------------------------------------------------------------- */

#if defined(__x86_64__)
enum { SYS_read = 0, SYS_write = 1, SYS_mmap = 9, SYS_mprotect = 10, SYS_munmap = 11,
       SYS_exit_group = 231, SYS_clock_gettime = 228 };
#elif defined(__powerpc64__)
enum { SYS_read = 3, SYS_write = 4, SYS_mmap = 90, SYS_mprotect = 125, SYS_munmap = 91,
       SYS_exit_group = 234, SYS_clock_gettime = 246 };
#else /* aarch64, riscv64, loongarch64: the generic table */
enum { SYS_read = 63, SYS_write = 64, SYS_mmap = 222, SYS_mprotect = 226, SYS_munmap = 215,
       SYS_exit_group = 94, SYS_clock_gettime = 113 };
#endif

/* Returns the result, or -errno on failure (the Linux convention on every target). */
static long syscall6(long n, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
#elif defined(__riscv)
    register long a7 __asm__("a7") = n;
    register long a0 __asm__("a0") = a;
    register long a1 __asm__("a1") = b;
    register long a2 __asm__("a2") = c;
    register long a3 __asm__("a3") = d;
    register long a4 __asm__("a4") = e;
    register long a5 __asm__("a5") = f;
    __asm__ volatile("ecall"
                     : "+r"(a0)
                     : "r"(a7), "r"(a1), "r"(a2), "r"(a3), "r"(a4), "r"(a5)
                     : "memory");
    return a0;
#elif defined(__loongarch__)
    register long a7 __asm__("$a7") = n;
    register long a0 __asm__("$a0") = a;
    register long a1 __asm__("$a1") = b;
    register long a2 __asm__("$a2") = c;
    register long a3 __asm__("$a3") = d;
    register long a4 __asm__("$a4") = e;
    register long a5 __asm__("$a5") = f;
    __asm__ volatile("syscall 0"
                     : "+r"(a0)
                     : "r"(a7), "r"(a1), "r"(a2), "r"(a3), "r"(a4), "r"(a5)
                     : "$t0", "$t1", "$t2", "$t3", "$t4", "$t5", "$t6", "$t7", "$t8",
                       "memory");
    return a0;
#elif defined(__powerpc64__)
    /* The kernel flags an error in cr0.SO and returns a positive errno: negate it. */
    register long r0 __asm__("r0") = n;
    register long r3 __asm__("r3") = a;
    register long r4 __asm__("r4") = b;
    register long r5 __asm__("r5") = c;
    register long r6 __asm__("r6") = d;
    register long r7 __asm__("r7") = e;
    register long r8 __asm__("r8") = f;
    __asm__ volatile("sc\n\tbns+ 1f\n\tneg %1, %1\n1:"
                     : "+r"(r0), "+r"(r3), "+r"(r4), "+r"(r5), "+r"(r6), "+r"(r7),
                       "+r"(r8)
                     :
                     : "r9", "r10", "r11", "r12", "cr0", "ctr", "xer", "memory");
    return r3;
#else
#error "elfjit's runner does not support this architecture"
#endif
}

/* ---------------------------------------------------------------------------------- */
/* Entry point                                                                         */
/* ---------------------------------------------------------------------------------- */

/* _start: align the stack, call runner_main (which never returns), trap if it does. */
#if defined(__x86_64__)
__asm__(".text\n.globl _start\n.type _start,@function\n_start:\n"
        "\txor %ebp, %ebp\n"
        "\tand $-16, %rsp\n"
        "\tcall runner_main\n"
        "\tud2\n");
#elif defined(__aarch64__)
__asm__(".text\n.globl _start\n.type _start,%function\n_start:\n"
        "\tmov x29, #0\n"
        "\tmov x30, #0\n"
        "\tmov x0, sp\n"
        "\tand sp, x0, #-16\n"
        "\tbl runner_main\n"
        "\tbrk #0\n");
#elif defined(__riscv)
__asm__(".text\n.globl _start\n.type _start,@function\n_start:\n"
        "\tandi sp, sp, -16\n"
        "\tcall runner_main\n"
        "\tebreak\n");
#elif defined(__loongarch__)
__asm__(".text\n.globl _start\n.type _start,@function\n_start:\n"
        "\tbstrins.d $sp, $zero, 3, 0\n"
        "\tbl runner_main\n"
        "\tbreak 0\n");
#elif defined(__powerpc64__)
/* Find our own address (bcl), derive the TOC pointer r2 from it, and give runner_main an
 * ELFv2 minimum stack frame (32 bytes, back chain 0). */
__asm__(".text\n.globl _start\n.type _start,@function\n_start:\n"
        "\tbcl 20, 31, 1f\n"
        "1:\tmflr 12\n"
        "\taddis 2, 12, (.TOC. - 1b)@ha\n"
        "\taddi 2, 2, (.TOC. - 1b)@l\n"
        "\tclrrdi 1, 1, 4\n"
        "\tli 0, 0\n"
        "\tstdu 0, -32(1)\n"
        "\tbl runner_main\n"
        "\tnop\n"
        "\ttrap\n");
#endif

/* ---------------------------------------------------------------------------------- */
/* The far function                                                                    */
/* ---------------------------------------------------------------------------------- */

/* Linked at least 4 GiB away from the image (its own section is placed far above by the
 * link flags), so a kernel calling it must go through a stub or veneer. */
__attribute__((section("elfjit_far"), noinline)) int elfjit_far_add(int x)
{
    return x + 1000;
}

/* ---------------------------------------------------------------------------------- */
/* The runner                                                                          */
/* ---------------------------------------------------------------------------------- */

enum { PROT_READ = 1, PROT_WRITE = 2, PROT_EXEC = 4 };
enum { MAP_PRIVATE = 0x02, MAP_ANONYMOUS = 0x20, MAP_FIXED_NOREPLACE = 0x100000 };
enum { CLOCK_MONOTONIC = 1 };

struct request {
    uint64_t magic;
    uint64_t image_base, image_size;
    uint64_t segments[3][2]; /* offset, size: code (RX), read-only (R), data (RW) */
    uint64_t shim;
    uint64_t args_size;
    uint64_t buffers_base, buffers_size;
};

struct reply {
    uint64_t magic;
    uint64_t ret;
    uint64_t call_ns;
};

struct timespec64 {
    int64_t sec, nsec;
};

static size_t text_length(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}

static void write_all(int fd, const void *data, uint64_t size);

static __attribute__((noreturn)) void exit_with(int status)
{
    for (;;)
        syscall6(SYS_exit_group, status, 0, 0, 0, 0, 0);
}

/* Appends the decimal form of v to buf at *len. */
static void append_number(char *buf, size_t *len, size_t cap, long v)
{
    char digits[24];
    size_t n = 0;
    unsigned long u = v < 0 ? 0UL - (unsigned long)v : (unsigned long)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u && n < sizeof digits);
    if (v < 0 && *len < cap)
        buf[(*len)++] = '-';
    while (n > 0 && *len < cap)
        buf[(*len)++] = digits[--n];
}

/* Prints "elfjit-runner: <what>[ (error N)]" on stderr and exits with `status`. */
static __attribute__((noreturn)) void fail(int status, const char *what, long err)
{
    char line[256];
    size_t len = 0, cap = sizeof line - 1;
    const char *prefix = "elfjit-runner: ";
    for (const char *p = prefix; *p && len < cap; p++)
        line[len++] = *p;
    for (size_t i = 0; i < text_length(what) && len < cap; i++)
        line[len++] = what[i];
    if (err != 0) {
        const char *mid = " (error ";
        for (const char *p = mid; *p && len < cap; p++)
            line[len++] = *p;
        append_number(line, &len, cap, err);
        if (len < cap)
            line[len++] = ')';
    }
    line[len++] = '\n';
    /* Best effort: nothing more can be done if stderr is gone. */
    syscall6(SYS_write, 2, (long)line, (long)len, 0, 0, 0);
    exit_with(status);
}

/* Reads exactly `size` bytes from stdin. */
static void read_all(void *data, uint64_t size)
{
    unsigned char *p = data;
    while (size > 0) {
        long chunk = size > (1UL << 30) ? (1L << 30) : (long)size;
        long n = syscall6(SYS_read, 0, (long)p, chunk, 0, 0, 0);
        if (n == -4) /* EINTR */
            continue;
        if (n < 0)
            fail(3, "cannot read the request", -n);
        if (n == 0)
            fail(3, "the request ended early", 0);
        p += n;
        size -= (uint64_t)n;
    }
}

static void write_all(int fd, const void *data, uint64_t size)
{
    const unsigned char *p = data;
    while (size > 0) {
        long chunk = size > (1UL << 30) ? (1L << 30) : (long)size;
        long n = syscall6(SYS_write, fd, (long)p, chunk, 0, 0, 0);
        if (n == -4)
            continue;
        if (n <= 0)
            fail(4, "cannot write the reply", -n);
        p += n;
        size -= (uint64_t)n;
    }
}

/* Maps `size` bytes (rounded up to 64 KiB) of fresh read/write memory exactly at `addr`. */
static void map_at(uint64_t addr, uint64_t size, const char *what)
{
    uint64_t len = (size + 0xffff) & ~(uint64_t)0xffff;
    long got = syscall6(SYS_mmap, (long)addr, (long)len, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (got < 0 && got > -4096)
        fail(5, what, -got);
    if ((uint64_t)got != addr) {
        /* An older kernel (or qemu) took the flag as a hint and put it elsewhere. */
        syscall6(SYS_munmap, got, (long)len, 0, 0, 0, 0);
        fail(5, what, 17 /* EEXIST */);
    }
}

static int64_t now_ns(void)
{
    struct timespec64 t = { 0, 0 };
    syscall6(SYS_clock_gettime, CLOCK_MONOTONIC, (long)&t, 0, 0, 0, 0);
    return t.sec * 1000000000 + t.nsec;
}

/* Aligned for any scalar the shim may store. */
static unsigned char args_block[MAX_ARGS_SIZE] __attribute__((aligned(16)));
static unsigned char ret_slot[16] __attribute__((aligned(16)));

static __attribute__((used, noreturn)) void runner_main(void)
{
    struct request req;
    read_all(&req, sizeof req);
    if (req.magic != REQUEST_MAGIC)
        fail(2, "not an elfjit runner request (protocol mismatch)", 0);
    if (req.image_size == 0 || (req.image_base & 0xffff) || (req.image_size & 0xffff))
        fail(2, "image base or size not 64 KiB aligned", 0);
    if (req.args_size > MAX_ARGS_SIZE)
        fail(2, "argument block too large", 0);
    for (int i = 0; i < 3; i++) {
        uint64_t off = req.segments[i][0], size = req.segments[i][1];
        if ((off & 0xffff) || (size & 0xffff) || off > req.image_size ||
            size > req.image_size - off)
            fail(2, "segment outside the image or not 64 KiB aligned", 0);
    }
    if (req.shim < req.image_base + req.segments[0][0] ||
        req.shim >= req.image_base + req.segments[0][0] + req.segments[0][1])
        fail(2, "shim address outside the code segment", 0);

    /* The image: read into writable memory, then each segment gets its final protection. */
    map_at(req.image_base, req.image_size, "cannot map the image at its link address");
    read_all((void *)(uintptr_t)req.image_base, req.image_size);
    static const int prot[3] = { PROT_READ | PROT_EXEC, PROT_READ, PROT_READ | PROT_WRITE };
    for (int i = 0; i < 3; i++) {
        uint64_t size = req.segments[i][1];
        if (size == 0)
            continue;
        long r = syscall6(SYS_mprotect, (long)(req.image_base + req.segments[i][0]), (long)size,
                          prot[i], 0, 0, 0);
        if (r < 0)
            fail(5, "cannot protect a segment", -r);
    }
    char *code = (char *)(uintptr_t)(req.image_base + req.segments[0][0]);
    __clear_cache(code, code + req.segments[0][1]);

    read_all(args_block, req.args_size);
    if (req.buffers_size > 0) {
        map_at(req.buffers_base, req.buffers_size, "cannot map the argument buffers");
        read_all((void *)(uintptr_t)req.buffers_base, req.buffers_size);
    }

    void (*shim)(const unsigned char *, void *) =
        (void (*)(const unsigned char *, void *))(uintptr_t)req.shim;
    int64_t start = now_ns();
    shim(args_block, ret_slot);
    int64_t end = now_ns();

    struct reply rep = { REPLY_MAGIC, 0, (uint64_t)(end - start) };
    memcpy(&rep.ret, ret_slot, sizeof rep.ret);
    write_all(1, &rep, sizeof rep);
    if (req.buffers_size > 0)
        write_all(1, (const void *)(uintptr_t)req.buffers_base, req.buffers_size);
    exit_with(0);
}
