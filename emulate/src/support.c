/*
 * support.c: the library a kernel links against inside elfjit's emulated runner.
 *
 * The runner is a static, freestanding program (no libc), so everything a kernel may call
 * is defined here, in plain C, for every target elfjit emulates (x86_64, aarch64,
 * riscv64, loongarch64, ppc64le; all 64-bit little-endian):
 *
 *   - memcpy, memmove, memset, memcmp;
 *   - libm: exp, exp2, expm1, log, log2, log10, log1p, pow, sin, cos, tan, sinh, cosh,
 *     tanh, atan, atan2, asin, acos, sqrt, cbrt, fabs, copysign, floor, ceil, trunc, round,
 *     rint, nearbyint, fmin, fmax, fma, fmod, ldexp, scalbn, and the float (`f`) form of
 *     each;
 *   - the compiler-rt helpers clang calls: 128-bit division and modulo (__udivti3,
 *     __umodti3, __divti3, __modti3, __udivmodti4), half-precision conversions in all
 *     their spellings (__extendhfsf2, __extendhfdf2, __truncsfhf2, __truncdfhf2,
 *     __gnu_h2f_ieee, __gnu_f2h_ieee) and bfloat16 ones (__truncsfbf2, __truncdfbf2,
 *     __extendbfsf2);
 *   - __clear_cache, the instruction-cache flush (also used by the runner itself).
 *
 * Build rules (see emulate/runner.rs): -ffreestanding -fno-builtin -fno-math-errno
 * -ffp-contract=off, so nothing here turns into a call to a function that is not
 * defined here (a static -nostdlib link fails on any undefined reference), and IEEE
 * arithmetic is evaluated exactly as written. 128-bit division uses 64-bit operations
 * only; the half/bfloat16 conversions are integer bit manipulation.
 *
 * Accuracy. Every libm function is computed in double precision: range reduction with
 * multi-part constants, then a Taylor or atanh series evaluated far enough that the
 * truncation error is below 2^-60 on the reduced range. The double functions are within
 * a few ulp (exp/exp2/log/log2/sin/cos/tanh: about 2 ulp); the float functions round
 * that double result once, so they are within 1 ulp and almost always correctly rounded,
 * far inside the corpus tolerances (relative 2e-5 for expf, 1e-5 for plain f32 math).
 * Limits: sin/cos/tan reduce by pi/2 with a 3-part constant, accurate for |x| < 2^20
 * (about 1e6); the error grows with |x| beyond that, and from 2^30 on the argument is
 * first reduced by the double nearest 2 pi, which keeps results bounded but not accurate
 * (no Payne-Hanek reduction). pow with an integer exponent up to 64 in magnitude is
 * repeated squaring (a few ulp); otherwise it is exp(y * log|x|), whose relative error is
 * about |y * log x| * 2^-53 (fine for float; up to a few hundred ulp for double results
 * near the overflow threshold). fma is exact in hardware on aarch64/riscv64/ppc64le/
 * loongarch64; on baseline x86_64 (no FMA unit) it is an exact product plus an exact sum,
 * rounded twice (within 1 ulp), and a plain multiply-add for operands beyond 2^+-500.
 * fmod is exact.
 */

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------------- */
/* Bit access                                                                          */
/* ---------------------------------------------------------------------------------- */

static inline uint64_t dbits(double x)
{
    union { double f; uint64_t u; } v = { x };
    return v.u;
}

static inline double dfrom(uint64_t u)
{
    union { uint64_t u; double f; } v = { u };
    return v.f;
}

static inline uint32_t fbits(float x)
{
    union { float f; uint32_t u; } v = { x };
    return v.u;
}

static inline float ffrom(uint32_t u)
{
    union { uint32_t u; float f; } v = { u };
    return v.f;
}

#define SIGN64 0x8000000000000000ULL
#define ABS64 0x7fffffffffffffffULL
#define INF64 0x7ff0000000000000ULL

/* ---------------------------------------------------------------------------------- */
/* Memory                                                                              */
/* ---------------------------------------------------------------------------------- */

void *memcpy(void *restrict dst, const void *restrict src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    /* Word copies when both pointers are 8-byte aligned, bytes for the rest. */
    if ((((uintptr_t)d | (uintptr_t)s) & 7) == 0) {
        for (; n >= 8; n -= 8, d += 8, s += 8)
            *(uint64_t *)(void *)d = *(const uint64_t *)(const void *)s;
    }
    for (; n > 0; n--)
        *d++ = *s++;
    return dst;
}

void *memmove(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    if (d == s || n == 0)
        return dst;
    if ((uintptr_t)d < (uintptr_t)s || (uintptr_t)d >= (uintptr_t)s + n) {
        /* No harmful overlap copying forwards. */
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    } else {
        for (size_t i = n; i > 0; i--)
            d[i - 1] = s[i - 1];
    }
    return dst;
}

void *memset(void *dst, int c, size_t n)
{
    unsigned char *d = dst;
    for (; n > 0; n--)
        *d++ = (unsigned char)c;
    return dst;
}

int memcmp(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++) {
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Instruction cache                                                                   */
/* ---------------------------------------------------------------------------------- */

/* Makes instructions written to [begin, end) visible to instruction fetch. */
void __clear_cache(void *begin, void *end)
{
#if defined(__aarch64__)
    uint64_t ctr;
    __asm__ volatile("mrs %0, ctr_el0" : "=r"(ctr));
    uintptr_t dline = (uintptr_t)4 << ((ctr >> 16) & 15);
    uintptr_t iline = (uintptr_t)4 << (ctr & 15);
    uintptr_t start = (uintptr_t)begin, stop = (uintptr_t)end;
    /* Clean the data cache to the point of unification, then invalidate the I-cache. */
    for (uintptr_t a = start & ~(dline - 1); a < stop; a += dline)
        __asm__ volatile("dc cvau, %0" ::"r"(a) : "memory");
    __asm__ volatile("dsb ish" ::: "memory");
    for (uintptr_t a = start & ~(iline - 1); a < stop; a += iline)
        __asm__ volatile("ic ivau, %0" ::"r"(a) : "memory");
    __asm__ volatile("dsb ish\n\tisb" ::: "memory");
#elif defined(__riscv)
    /* Linux's riscv_flush_icache(start, end, flags = 0: all harts), then this hart. */
    register long a0 __asm__("a0") = (long)begin;
    register long a1 __asm__("a1") = (long)end;
    register long a2 __asm__("a2") = 0;
    register long a7 __asm__("a7") = 259;
    __asm__ volatile("ecall" : "+r"(a0) : "r"(a1), "r"(a2), "r"(a7) : "memory");
    __asm__ volatile("fence.i" ::: "memory");
#elif defined(__powerpc64__)
    /* 32 bytes is the smallest cache line of any POWER CPU: a safe stride. */
    const uintptr_t line = 32;
    uintptr_t start = (uintptr_t)begin & ~(line - 1), stop = (uintptr_t)end;
    for (uintptr_t a = start; a < stop; a += line)
        __asm__ volatile("dcbst 0, %0" ::"r"(a) : "memory");
    __asm__ volatile("sync" ::: "memory");
    for (uintptr_t a = start; a < stop; a += line)
        __asm__ volatile("icbi 0, %0" ::"r"(a) : "memory");
    __asm__ volatile("sync\n\tisync" ::: "memory");
#elif defined(__loongarch__)
    (void)begin;
    (void)end;
    __asm__ volatile("ibar 0" ::: "memory");
#else
    /* x86_64: instruction fetch is coherent with stores. */
    (void)begin;
    (void)end;
#endif
}

/* ---------------------------------------------------------------------------------- */
/* 128-bit integer division (64-bit operations only)                                   */
/* ---------------------------------------------------------------------------------- */

typedef unsigned __int128 u128;
typedef __int128 i128;

typedef struct {
    uint64_t hi, lo;
} pair;

static inline pair split(u128 v)
{
    pair p = { (uint64_t)(v >> 64), (uint64_t)v };
    return p;
}

static inline u128 join(pair p)
{
    return ((u128)p.hi << 64) | p.lo;
}

/* Leading zeros of a non-zero 64-bit value. */
static int clz64(uint64_t v)
{
    int n = 0;
    while (!(v & SIGN64)) {
        v <<= 1;
        n++;
    }
    return n;
}

static int clz128(pair v)
{
    return v.hi ? clz64(v.hi) : 64 + clz64(v.lo);
}

static pair shl1(pair v, uint64_t in)
{
    pair r = { (v.hi << 1) | (v.lo >> 63), (v.lo << 1) | in };
    return r;
}

static pair shl(pair v, int s)
{
    pair r;
    if (s == 0)
        return v;
    if (s >= 64) {
        r.hi = v.lo << (s - 64);
        r.lo = 0;
    } else {
        r.hi = (v.hi << s) | (v.lo >> (64 - s));
        r.lo = v.lo << s;
    }
    return r;
}

static int ge(pair a, pair b)
{
    return a.hi > b.hi || (a.hi == b.hi && a.lo >= b.lo);
}

static pair sub(pair a, pair b)
{
    pair r = { a.hi - b.hi - (a.lo < b.lo), a.lo - b.lo };
    return r;
}

/* Unsigned 128-bit division: quotient, and remainder through `rem` if not null.
 * Division by zero gives quotient 0 and remainder n (C leaves it undefined). */
u128 __udivmodti4(u128 n, u128 d, u128 *rem)
{
    pair num = split(n), den = split(d);
    pair q = { 0, 0 }, r = { 0, 0 };
    if (den.hi == 0 && den.lo == 0) {
        if (rem)
            *rem = n;
        return 0;
    }
    if (num.hi == 0 && den.hi == 0) {
        /* Both fit 64 bits: one native division. */
        q.lo = num.lo / den.lo;
        r.lo = num.lo % den.lo;
    } else if (ge(num, den)) {
        /* Shift-subtract long division over the bits where the quotient can be non-zero. */
        int s = clz128(den) - clz128(num);
        pair dd = shl(den, s);
        r = num;
        for (int i = 0; i <= s; i++) {
            q = shl1(q, 0);
            if (ge(r, dd)) {
                r = sub(r, dd);
                q.lo |= 1;
            }
            dd.lo = (dd.lo >> 1) | (dd.hi << 63);
            dd.hi >>= 1;
        }
    } else {
        r = num;
    }
    if (rem)
        *rem = join(r);
    return join(q);
}

u128 __udivti3(u128 n, u128 d)
{
    return __udivmodti4(n, d, 0);
}

u128 __umodti3(u128 n, u128 d)
{
    u128 r;
    __udivmodti4(n, d, &r);
    return r;
}

/* |v| as unsigned (well defined for the most negative value too). */
static u128 uabs(i128 v)
{
    return v < 0 ? (u128)0 - (u128)v : (u128)v;
}

/* Signed division truncates toward zero; the remainder takes the dividend's sign. */
i128 __divti3(i128 n, i128 d)
{
    u128 q = __udivmodti4(uabs(n), uabs(d), 0);
    return (i128)(((n < 0) != (d < 0)) ? (u128)0 - q : q);
}

i128 __modti3(i128 n, i128 d)
{
    u128 r;
    __udivmodti4(uabs(n), uabs(d), &r);
    return (i128)(n < 0 ? (u128)0 - r : r);
}

/* ---------------------------------------------------------------------------------- */
/* Half precision and bfloat16                                                         */
/* ---------------------------------------------------------------------------------- */

/* The helpers take and return the 16-bit float types where clang has them for the target
 * (so the value travels in the register clang's callers use) and uint16_t elsewhere,
 * which is the convention compiler-rt follows. */
#if defined(__FLT16_MAX__)
typedef _Float16 half_t;
#else
typedef uint16_t half_t;
#endif
#if defined(__x86_64__) || defined(__aarch64__) || defined(__riscv)
typedef __bf16 bf16_t;
#else
typedef uint16_t bf16_t;
#endif

static inline uint16_t half_bits(half_t h)
{
    uint16_t u;
    __builtin_memcpy(&u, &h, 2);
    return u;
}

static inline half_t half_from(uint16_t u)
{
    half_t h;
    __builtin_memcpy(&h, &u, 2);
    return h;
}

static inline bf16_t bf16_from(uint16_t u)
{
    bf16_t b;
    __builtin_memcpy(&b, &u, 2);
    return b;
}

static inline uint16_t bf16_bits(bf16_t b)
{
    uint16_t u;
    __builtin_memcpy(&u, &b, 2);
    return u;
}

/*
 * Rounds a finite, non-zero magnitude sig * 2^(exp - 63) (bit 63 of sig set) to nearest,
 * ties to even, in a binary format with `mbits` fraction bits and `ebits` exponent bits.
 * Returns the format's magnitude bits (infinity on overflow, 0 on underflow).
 */
static uint32_t round_magnitude(uint64_t sig, int exp, int mbits, int ebits)
{
    int bias = (1 << (ebits - 1)) - 1;
    uint32_t inf = ((1u << ebits) - 1) << mbits;
    int e = exp + bias; /* biased exponent if the result is normal */
    int shift = 63 - mbits; /* low bits of sig that do not fit */
    if (e >= (1 << ebits) - 1)
        return inf;
    if (e < 1) {
        shift += 1 - e; /* subnormal: fewer significant bits */
        e = 0;
    }
    if (shift > 64)
        return 0; /* below half the smallest subnormal */
    uint64_t kept = shift == 64 ? 0 : sig >> shift;
    uint64_t rest = shift == 64 ? sig : sig & ((1ULL << shift) - 1);
    uint64_t halfway = 1ULL << (shift - 1);
    if (rest > halfway || (rest == halfway && (kept & 1)))
        kept++; /* a carry into the exponent field is the right encoding */
    uint64_t bits = e >= 1 ? ((uint64_t)(e - 1) << mbits) + kept : kept;
    return bits >= inf ? inf : (uint32_t)bits;
}

/* sig * 2^(exp - 63) with bit 63 of sig set, for a finite non-zero double. */
static void normalize_double(uint64_t u, uint64_t *sig, int *exp)
{
    int e = (int)((u >> 52) & 0x7ff);
    uint64_t m = u & 0x000fffffffffffffULL;
    if (e == 0) {
        e = 1; /* subnormal: no implicit bit */
    } else {
        m |= 1ULL << 52;
    }
    *exp = e - 1023;
    m <<= 11;
    while (!(m & SIGN64)) {
        m <<= 1;
        (*exp)--;
    }
    *sig = m;
}

/* double -> 16-bit float (mbits fraction bits, ebits exponent bits), rounded once. */
static uint16_t narrow_double(double x, int mbits, int ebits)
{
    uint64_t u = dbits(x);
    uint16_t sign = (uint16_t)((u >> 48) & 0x8000);
    uint64_t a = u & ABS64;
    uint32_t inf = ((1u << ebits) - 1) << mbits;
    if (a > INF64) /* NaN: quiet, keeping the top payload bits */
        return (uint16_t)(sign | inf | (1u << (mbits - 1)) | ((a >> (52 - mbits)) & ((1u << mbits) - 1)));
    if (a == INF64)
        return (uint16_t)(sign | inf);
    if (a == 0)
        return sign;
    uint64_t sig;
    int exp;
    normalize_double(a, &sig, &exp);
    return (uint16_t)(sign | round_magnitude(sig, exp, mbits, ebits));
}

/* Every float is exactly a double, so narrowing through double rounds only once. */
static uint16_t f32_to_f16(float x) { return narrow_double((double)x, 10, 5); }
static uint16_t f64_to_f16(double x) { return narrow_double(x, 10, 5); }
static uint16_t f32_to_bf16(float x) { return narrow_double((double)x, 7, 8); }
static uint16_t f64_to_bf16(double x) { return narrow_double(x, 7, 8); }

/* half -> double, exactly. */
static double f16_to_f64(uint16_t h)
{
    uint64_t sign = (uint64_t)(h & 0x8000) << 48;
    int e = (h >> 10) & 0x1f;
    uint64_t m = h & 0x3ff;
    if (e == 0) /* zero or subnormal: m * 2^-24, exact */
        return dfrom(sign | dbits((double)m * 0x1p-24));
    if (e == 31) /* infinity or NaN */
        return dfrom(sign | INF64 | (m << 42));
    return dfrom(sign | ((uint64_t)(e - 15 + 1023) << 52) | (m << 42));
}

float __extendhfsf2(half_t h) { return (float)f16_to_f64(half_bits(h)); }
double __extendhfdf2(half_t h) { return f16_to_f64(half_bits(h)); }
half_t __truncsfhf2(float x) { return half_from(f32_to_f16(x)); }
half_t __truncdfhf2(double x) { return half_from(f64_to_f16(x)); }
float __gnu_h2f_ieee(half_t h) { return __extendhfsf2(h); }
half_t __gnu_f2h_ieee(float x) { return __truncsfhf2(x); }
bf16_t __truncsfbf2(float x) { return bf16_from(f32_to_bf16(x)); }
bf16_t __truncdfbf2(double x) { return bf16_from(f64_to_bf16(x)); }
float __extendbfsf2(bf16_t b) { return ffrom((uint32_t)bf16_bits(b) << 16); }

/* ---------------------------------------------------------------------------------- */
/* libm: exact operations                                                              */
/* ---------------------------------------------------------------------------------- */

double fabs(double x) { return dfrom(dbits(x) & ABS64); }
float fabsf(float x) { return ffrom(fbits(x) & 0x7fffffffu); }
double copysign(double x, double y) { return dfrom((dbits(x) & ABS64) | (dbits(y) & SIGN64)); }
float copysignf(float x, float y) { return ffrom((fbits(x) & 0x7fffffffu) | (fbits(y) & 0x80000000u)); }

/* Lowered to the hardware square root on every target (-fno-math-errno). */
double sqrt(double x) { return __builtin_sqrt(x); }
float sqrtf(float x) { return __builtin_sqrtf(x); }

double trunc(double x)
{
    uint64_t u = dbits(x);
    int e = (int)((u >> 52) & 0x7ff) - 1023;
    if (e >= 52)
        return x; /* already integral, or infinite, or NaN */
    if (e < 0)
        return dfrom(u & SIGN64); /* |x| < 1 */
    return dfrom(u & ~(0x000fffffffffffffULL >> e));
}

double floor(double x)
{
    double t = trunc(x);
    return t > x ? t - 1.0 : t;
}

double ceil(double x)
{
    double t = trunc(x);
    return t < x ? t + 1.0 : t;
}

/* Halfway cases away from zero. */
double round(double x)
{
    double t = trunc(x);
    double d = x - t; /* exact */
    if (d >= 0.5)
        return t + 1.0;
    if (d <= -0.5)
        return t - 1.0;
    return t;
}

/* Halfway cases to even (the default rounding mode). */
double rint(double x)
{
    uint64_t u = dbits(x);
    if (((u >> 52) & 0x7ff) >= 1023 + 52)
        return x;
    const double big = 0x1p52;
    double r = (u & SIGN64) ? (x - big) + big : (x + big) - big;
    return dfrom(dbits(r) | (u & SIGN64)); /* keep the sign of a zero result */
}

double nearbyint(double x) { return rint(x); }

float truncf(float x)
{
    uint32_t u = fbits(x);
    int e = (int)((u >> 23) & 0xff) - 127;
    if (e >= 23)
        return x;
    if (e < 0)
        return ffrom(u & 0x80000000u);
    return ffrom(u & ~(0x007fffffu >> e));
}

float floorf(float x)
{
    float t = truncf(x);
    return t > x ? t - 1.0f : t;
}

float ceilf(float x)
{
    float t = truncf(x);
    return t < x ? t + 1.0f : t;
}

float roundf(float x)
{
    float t = truncf(x);
    float d = x - t;
    if (d >= 0.5f)
        return t + 1.0f;
    if (d <= -0.5f)
        return t - 1.0f;
    return t;
}

float rintf(float x)
{
    uint32_t u = fbits(x);
    if (((u >> 23) & 0xff) >= 127 + 23)
        return x;
    const float big = 0x1p23f;
    float r = (u & 0x80000000u) ? (x - big) + big : (x + big) - big;
    return ffrom(fbits(r) | (u & 0x80000000u));
}

float nearbyintf(float x) { return rintf(x); }

/* fmin/fmax ignore a NaN operand. */
double fmin(double x, double y) { return x != x ? y : y != y ? x : (x < y || (x == y && (dbits(x) & SIGN64))) ? x : y; }
double fmax(double x, double y) { return x != x ? y : y != y ? x : (x > y || (x == y && !(dbits(x) & SIGN64))) ? x : y; }
float fminf(float x, float y) { return (float)fmin(x, y); }
float fmaxf(float x, float y) { return (float)fmax(x, y); }

/* 2^k as a double, for -1022 <= k <= 1023. */
static inline double pow2i(int k)
{
    return dfrom((uint64_t)(k + 1023) << 52);
}

double scalbn(double x, int n)
{
    /* At most three steps, each by a representable power of two. */
    if (n > 1023) {
        x *= 0x1p1023;
        n -= 1023;
        if (n > 1023) {
            x *= 0x1p1023;
            n -= 1023;
            if (n > 1023)
                n = 1023;
        }
    } else if (n < -1022) {
        /* Scale by 2^-969 (= 2^-1022 * 2^53) so only the last step can round. */
        x *= 0x1p-969;
        n += 969;
        if (n < -1022) {
            x *= 0x1p-969;
            n += 969;
            if (n < -1022)
                n = -1022;
        }
    }
    return x * pow2i(n);
}

double ldexp(double x, int n) { return scalbn(x, n); }
float scalbnf(float x, int n) { return (float)scalbn(x, n < -400 ? -400 : n > 400 ? 400 : n); }
float ldexpf(float x, int n) { return scalbnf(x, n); }

#if defined(__x86_64__) && !defined(__FMA__)
/* Splits a into hi + lo with 26-bit halves (Veltkamp), so hi * hi etc. are exact. */
static void veltkamp(double a, double *hi, double *lo)
{
    double c = 134217729.0 * a; /* 2^27 + 1 */
    *hi = c - (c - a);
    *lo = a - *hi;
}

double fma(double x, double y, double z)
{
    if (x != x || y != y || z != z)
        return x * y + z;
    if (!(fabs(x) < 0x1p500 && fabs(x) > 0x1p-500 && fabs(y) < 0x1p500 && fabs(y) > 0x1p-500))
        return x * y + z; /* operands beyond 2^+-500 (or zero): plain multiply-add */
    double p = x * y;
    if (p - p != 0 || z - z != 0 || p == 0 || fabs(p) > 0x1p1000 || fabs(p) < 0x1p-900)
        return p + z; /* infinities, zeros, or extremes where the error terms underflow */
    /* p + e = x * y exactly (Dekker), s + t = p + z exactly (Knuth), then one sum. */
    double xh, xl, yh, yl;
    veltkamp(x, &xh, &xl);
    veltkamp(y, &yh, &yl);
    double e = ((xh * yh - p) + xh * yl + xl * yh) + xl * yl;
    double s = p + z;
    double bb = s - p;
    double t = (p - (s - bb)) + (z - bb);
    return s + (t + e);
}

/* The product of two floats is exact in double; one addition, one narrowing. */
float fmaf(float x, float y, float z) { return (float)((double)x * (double)y + (double)z); }
#else
/* A single fused instruction on this target. */
double fma(double x, double y, double z) { return __builtin_fma(x, y, z); }
float fmaf(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
#endif

/* Exact remainder x - n*y, n = trunc(x/y), by binary long division on the significands. */
double fmod(double x, double y)
{
    uint64_t ux = dbits(x), uy = dbits(y);
    uint64_t sx = ux & SIGN64;
    uint64_t ax = ux & ABS64, ay = uy & ABS64;
    if (ax >= INF64 || ay > INF64 || ay == 0)
        return (x * y) / (x * y); /* NaN */
    if (ax < ay)
        return x;
    uint64_t mx, my;
    int ex, ey;
    normalize_double(ax, &mx, &ex);
    normalize_double(ay, &my, &ey);
    /* Work with 63-bit significands so a shift left cannot overflow. */
    mx >>= 1;
    my >>= 1;
    for (; ex > ey; ex--) {
        if (mx >= my)
            mx -= my;
        mx <<= 1;
    }
    if (mx >= my)
        mx -= my;
    if (mx == 0)
        return dfrom(sx);
    /* mx * 2^(ey - 62) is exact: put it back together. */
    double r = scalbn((double)mx, ey - 62);
    return dfrom(dbits(r) | sx);
}

float fmodf(float x, float y) { return (float)fmod(x, y); }

/* ---------------------------------------------------------------------------------- */
/* libm: exponentials and logarithms                                                   */
/* ---------------------------------------------------------------------------------- */

/* ln 2 in two parts: LN2_HI has 32 significant bits, so k * LN2_HI is exact for the
 * |k| <= 1100 the reductions use. */
static const double LN2_HI = 0x1.62e42ffp-1;
static const double LN2_LO = -0x1.718432a1b0e26p-35;
static const double INV_LN2 = 0x1.71547652b82fep+0;
static const double INV_LN10 = 0x1.bcb7b1526e50ep-2;

/* e^r - 1 for |r| <= 0.35 (ln2/2 rounded up): Taylor series to r^15, truncation error
 * below 0.35^16 / 16! < 2^-80 relative. */
static double expm1_small(double r)
{
    double p = 1.0 / 1307674368000.0;      /* 1/15! */
    p = 1.0 / 87178291200.0 + r * p;       /* 1/14! */
    p = 1.0 / 6227020800.0 + r * p;        /* 1/13! */
    p = 1.0 / 479001600.0 + r * p;         /* 1/12! */
    p = 1.0 / 39916800.0 + r * p;          /* 1/11! */
    p = 1.0 / 3628800.0 + r * p;           /* 1/10! */
    p = 1.0 / 362880.0 + r * p;            /* 1/9! */
    p = 1.0 / 40320.0 + r * p;             /* 1/8! */
    p = 1.0 / 5040.0 + r * p;              /* 1/7! */
    p = 1.0 / 720.0 + r * p;               /* 1/6! */
    p = 1.0 / 120.0 + r * p;               /* 1/5! */
    p = 1.0 / 24.0 + r * p;                /* 1/4! */
    p = 1.0 / 6.0 + r * p;                 /* 1/3! */
    p = 0.5 + r * p;                       /* 1/2! */
    return r + r * (r * p);
}

/* e^x = 2^k * e^r with x = k ln2 + r, |r| <= ln2/2. */
double exp(double x)
{
    if (x != x)
        return x;
    if (x > 709.782712893384)
        return dfrom(INF64);
    if (x < -745.1332191019412)
        return 0.0;
    double k = rint(x * INV_LN2);
    double r = (x - k * LN2_HI) - k * LN2_LO;
    return scalbn(1.0 + expm1_small(r), (int)k);
}

/* 2^x = 2^k * e^(f ln2), x = k + f, |f| <= 1/2. */
double exp2(double x)
{
    if (x != x)
        return x;
    if (x >= 1024.0)
        return dfrom(INF64);
    if (x < -1075.0)
        return 0.0;
    double k = rint(x);
    double f = x - k; /* exact */
    double r = f * LN2_HI + f * LN2_LO;
    return scalbn(1.0 + expm1_small(r), (int)k);
}

double expm1(double x)
{
    if (x != x)
        return x;
    if (fabs(x) <= 0.35)
        return expm1_small(x);
    if (x < -40.0)
        return -1.0;
    return exp(x) - 1.0; /* no harmful cancellation once |x| > 0.35 */
}

/*
 * ln(m) for m in [sqrt(2)/2, sqrt(2)): with s = (m - 1) / (m + 1), ln(m) = 2 atanh(s)
 * = 2s + 2s^3/3 + 2s^5/5 + ...; |s| <= 0.1716, so s^2 <= 0.0295 and the series to s^25
 * truncates below 2^-60 relative. Returned as (2s) + tail to keep the big term exact-ish.
 */
static double log_reduced(double f /* m - 1 */)
{
    double s = f / (2.0 + f);
    double z = s * s;
    double p = 2.0 / 25.0;
    p = 2.0 / 23.0 + z * p;
    p = 2.0 / 21.0 + z * p;
    p = 2.0 / 19.0 + z * p;
    p = 2.0 / 17.0 + z * p;
    p = 2.0 / 15.0 + z * p;
    p = 2.0 / 13.0 + z * p;
    p = 2.0 / 11.0 + z * p;
    p = 2.0 / 9.0 + z * p;
    p = 2.0 / 7.0 + z * p;
    p = 2.0 / 5.0 + z * p;
    p = 2.0 / 3.0 + z * p;
    return 2.0 * s + s * (z * p);
}

/* Splits a positive finite x into x = m * 2^e with m in [sqrt(2)/2, sqrt(2)). */
static double split_log(double x, int *e)
{
    uint64_t u = dbits(x);
    int k = 0;
    if (u < 0x0010000000000000ULL) { /* subnormal */
        x *= 0x1p54;
        u = dbits(x);
        k = -54;
    }
    k += (int)(u >> 52) - 1023;
    double m = dfrom((u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL); /* [1, 2) */
    if (m > 0x1.6a09e667f3bcdp+0) { /* sqrt(2) */
        m *= 0.5;
        k += 1;
    }
    *e = k;
    return m;
}

/* NaN for x < 0 or NaN, -inf for zero, +inf for +inf; 0 means "x is a normal case". */
static int log_special(double x, double *out)
{
    if (x != x || x < 0) {
        *out = (x - x) / (x - x);
        if (x != x)
            *out = x;
        return 1;
    }
    if (x == 0) {
        *out = -dfrom(INF64);
        return 1;
    }
    if (dbits(x) == INF64) {
        *out = x;
        return 1;
    }
    return 0;
}

double log(double x)
{
    double out;
    if (log_special(x, &out))
        return out;
    int e;
    double m = split_log(x, &e);
    double l = log_reduced(m - 1.0); /* m - 1 is exact */
    return e * LN2_HI + (l + e * LN2_LO);
}

double log2(double x)
{
    double out;
    if (log_special(x, &out))
        return out;
    int e;
    double m = split_log(x, &e);
    return (double)e + log_reduced(m - 1.0) * INV_LN2; /* exact for powers of two */
}

double log10(double x)
{
    double out;
    if (log_special(x, &out))
        return out;
    return log(x) * INV_LN10;
}

double log1p(double x)
{
    if (x != x)
        return x;
    if (x <= -1.0)
        return x == -1.0 ? -dfrom(INF64) : (x - x) / (x - x);
    if (fabs(x) < 0.25)
        return log_reduced(x); /* 1 + x in [0.75, 1.25): the series directly, no 1 + x */
    return log(1.0 + x);
}

/* Whether a finite y is an integer, and if so whether it is odd. */
static int int_kind(double y)
{
    if (trunc(y) != y)
        return 0; /* not an integer */
    if (fabs(y) >= 0x1p53)
        return 2; /* even */
    return ((int64_t)y & 1) ? 1 : 2;
}

double pow(double x, double y)
{
    /* C99 Annex F special cases, in the order it lists them. */
    if (y == 0)
        return 1.0;
    if (x == 1.0)
        return 1.0;
    if (x != x || y != y)
        return x + y;
    int yk = (dbits(y) & ABS64) == INF64 ? 2 : int_kind(y);
    if (x == 0) {
        double z = (yk == 1) ? x : 0.0; /* keep the sign of x for odd integer y */
        return y < 0 ? 1.0 / z : z;
    }
    if ((dbits(y) & ABS64) == INF64) {
        double ax = fabs(x);
        if (ax == 1.0)
            return 1.0;
        return ((ax > 1.0) == (y > 0)) ? dfrom(INF64) : 0.0;
    }
    if ((dbits(x) & ABS64) == INF64) {
        double r = y < 0 ? 0.0 : dfrom(INF64);
        return (x < 0 && yk == 1) ? -r : r;
    }
    if (x < 0 && yk == 0)
        return (x - x) / (x - x); /* negative base, non-integer exponent */
    if (yk != 0 && fabs(y) <= 64.0) {
        /* Small integer exponents by repeated squaring: a few roundings, no log/exp. */
        int64_t k = (int64_t)fabs(y);
        double base = x, r = 1.0;
        for (; k > 0; k >>= 1) {
            if (k & 1)
                r *= base;
            base *= base;
        }
        return y < 0 ? 1.0 / r : r;
    }
    double r = exp(y * log(fabs(x)));
    return (x < 0 && yk == 1) ? -r : r;
}

double cbrt(double x)
{
    if (x == 0 || x != x || (dbits(x) & ABS64) == INF64)
        return x;
    double a = fabs(x);
    double r = exp(log(a) / 3.0);
    r = r - (r * r * r - a) / (3.0 * r * r); /* one Newton step */
    return x < 0 ? -r : r;
}

/* ---------------------------------------------------------------------------------- */
/* libm: trigonometric and hyperbolic                                                  */
/* ---------------------------------------------------------------------------------- */

/* pi/2 in three parts; the first two have 33 significant bits, so n * PIO2_1 and
 * n * PIO2_2 are exact for |n| < 2^20. */
static const double PIO2_1 = 0x1.921fb544p+0;
static const double PIO2_2 = 0x1.0b4611a6p-34;
static const double PIO2_3 = 0x1.3198a2e037073p-69;
static const double INV_PIO2 = 0x1.45f306dc9c883p-1;
static const double PIO2 = 0x1.921fb54442d18p+0;
static const double PIO2_LO = 0x1.1a62633145c07p-54;
static const double PIO6 = 0x1.0c152382d7366p-1;
static const double SQRT3 = 0x1.bb67ae8584caap+0;

/* x = n * pi/2 + r, |r| <= pi/4 (plus rounding); returns n mod 4. */
static int reduce_pio2(double x, double *r)
{
    if (fabs(x) <= 0.785398163397448) {
        *r = x;
        return 0;
    }
    if (fabs(x) >= 0x1p30) {
        /* Beyond the 3-part constant's reach: reduce by the double nearest 2 pi (exact
         * fmod). Bounded, but not an accurate angle: see the accuracy note at the top. */
        x = fmod(x, 4.0 * PIO2);
    }
    double n = rint(x * INV_PIO2);
    *r = ((x - n * PIO2_1) - n * PIO2_2) - n * PIO2_3;
    return (int)(n - 4.0 * floor(n * 0.25)); /* n mod 4, exact for any integral n */
}

/* sin r and cos r for |r| <= pi/4: Taylor series to r^19 and r^20 (truncation error
 * below 2^-60 relative). */
static double sin_reduced(double r)
{
    double z = r * r;
    double p = -1.0 / 121645100408832000.0; /* -1/19! */
    p = 1.0 / 355687428096000.0 + z * p;    /* 1/17! */
    p = -1.0 / 1307674368000.0 + z * p;     /* -1/15! */
    p = 1.0 / 6227020800.0 + z * p;         /* 1/13! */
    p = -1.0 / 39916800.0 + z * p;          /* -1/11! */
    p = 1.0 / 362880.0 + z * p;             /* 1/9! */
    p = -1.0 / 5040.0 + z * p;              /* -1/7! */
    p = 1.0 / 120.0 + z * p;                /* 1/5! */
    p = -1.0 / 6.0 + z * p;                 /* -1/3! */
    return r + r * (z * p);
}

static double cos_reduced(double r)
{
    double z = r * r;
    double p = 1.0 / 2432902008176640000.0; /* 1/20! */
    p = -1.0 / 6402373705728000.0 + z * p;  /* -1/18! */
    p = 1.0 / 20922789888000.0 + z * p;     /* 1/16! */
    p = -1.0 / 87178291200.0 + z * p;       /* -1/14! */
    p = 1.0 / 479001600.0 + z * p;          /* 1/12! */
    p = -1.0 / 3628800.0 + z * p;           /* -1/10! */
    p = 1.0 / 40320.0 + z * p;              /* 1/8! */
    p = -1.0 / 720.0 + z * p;               /* -1/6! */
    p = 1.0 / 24.0 + z * p;                 /* 1/4! */
    double hz = 0.5 * z;
    return (1.0 - hz) + z * (z * p);
}

double sin(double x)
{
    if ((dbits(x) & ABS64) >= INF64)
        return x - x; /* NaN for NaN and infinities */
    double r;
    switch (reduce_pio2(x, &r)) {
    case 0: return sin_reduced(r);
    case 1: return cos_reduced(r);
    case 2: return -sin_reduced(r);
    default: return -cos_reduced(r);
    }
}

double cos(double x)
{
    if ((dbits(x) & ABS64) >= INF64)
        return x - x;
    double r;
    switch (reduce_pio2(x, &r)) {
    case 0: return cos_reduced(r);
    case 1: return -sin_reduced(r);
    case 2: return -cos_reduced(r);
    default: return sin_reduced(r);
    }
}

double tan(double x)
{
    if ((dbits(x) & ABS64) >= INF64)
        return x - x;
    double r;
    int n = reduce_pio2(x, &r);
    double s = sin_reduced(r), c = cos_reduced(r);
    return (n & 1) ? -c / s : s / c;
}

/* atan for 0 <= t <= tan(pi/12) = 0.268: Taylor series to t^31 (error below 2^-60). */
static double atan_small(double t)
{
    double z = t * t;
    double p = -1.0 / 31.0;
    for (int k = 29; k >= 3; k -= 2)
        p = ((k & 2) ? -1.0 : 1.0) / k + z * p; /* signs alternate: -1/3, +1/5, ... */
    return t + t * (z * p);
}

double atan(double x)
{
    if (x != x)
        return x;
    double a = fabs(x);
    double r;
    if (a > 1.0) {
        /* atan(a) = pi/2 - atan(1/a) */
        double b = 1.0 / a;
        r = b > 0.2679491924311227 ? PIO6 + atan_small((b * SQRT3 - 1.0) / (SQRT3 + b)) : atan_small(b);
        r = (PIO2 - r) + PIO2_LO;
    } else if (a > 0.2679491924311227) {
        /* atan(a) = pi/6 + atan((a sqrt3 - 1) / (sqrt3 + a)) */
        r = PIO6 + atan_small((a * SQRT3 - 1.0) / (SQRT3 + a));
    } else {
        r = atan_small(a);
    }
    return x < 0 ? -r : r;
}

double atan2(double y, double x)
{
    if (x != x || y != y)
        return x + y;
    int ysign = (dbits(y) & SIGN64) != 0;
    double pi = 2.0 * PIO2;
    if (y == 0) {
        double r = (dbits(x) & SIGN64) ? pi : 0.0;
        return ysign ? -r : r;
    }
    if (x == 0)
        return ysign ? -PIO2 : PIO2;
    int xinf = (dbits(x) & ABS64) == INF64, yinf = (dbits(y) & ABS64) == INF64;
    double r;
    if (xinf && yinf)
        r = x > 0 ? PIO2 / 2.0 : 3.0 * PIO2 / 2.0;
    else if (xinf)
        r = x > 0 ? 0.0 : pi;
    else if (yinf)
        r = PIO2;
    else {
        r = atan(fabs(y / x));
        if (x < 0)
            r = pi - r;
    }
    return ysign ? -r : r;
}

double asin(double x)
{
    if (!(fabs(x) <= 1.0))
        return (x - x) / (x - x);
    return atan2(x, sqrt((1.0 - x) * (1.0 + x)));
}

double acos(double x)
{
    if (!(fabs(x) <= 1.0))
        return (x - x) / (x - x);
    return atan2(sqrt((1.0 - x) * (1.0 + x)), x);
}

double sinh(double x)
{
    double a = fabs(x), r;
    if (x != x)
        return x;
    if (a > 709.0) {
        double t = exp(0.5 * a); /* e^a / 2 without overflowing early */
        r = 0.5 * t * t;
    } else {
        double e = expm1(a); /* sinh a = (E + E / (E + 1)) / 2, E = e^a - 1 */
        r = 0.5 * (e + e / (e + 1.0));
    }
    return x < 0 ? -r : r;
}

double cosh(double x)
{
    double a = fabs(x);
    if (x != x)
        return x;
    if (a > 709.0) {
        double t = exp(0.5 * a);
        return 0.5 * t * t;
    }
    if (a > 22.0)
        return 0.5 * exp(a); /* e^-a is below half an ulp */
    double e = expm1(a); /* cosh a = 1 + E^2 / (2 (E + 1)) */
    return 1.0 + (e * e) / (2.0 * (e + 1.0));
}

double tanh(double x)
{
    double a = fabs(x), r;
    if (x != x)
        return x;
    if (a > 22.0) {
        r = 1.0; /* tanh(22) rounds to 1 */
    } else {
        double e = expm1(2.0 * a); /* tanh a = E / (E + 2), E = e^(2a) - 1 */
        r = e / (e + 2.0);
    }
    return x < 0 ? -r : r;
}

/* ---------------------------------------------------------------------------------- */
/* libm: float forms (computed in double, rounded once)                                */
/* ---------------------------------------------------------------------------------- */

float expf(float x) { return (float)exp(x); }
float exp2f(float x) { return (float)exp2(x); }
float expm1f(float x) { return (float)expm1(x); }
float logf(float x) { return (float)log(x); }
float log2f(float x) { return (float)log2(x); }
float log10f(float x) { return (float)log10(x); }
float log1pf(float x) { return (float)log1p(x); }
float powf(float x, float y) { return (float)pow(x, y); }
float cbrtf(float x) { return (float)cbrt(x); }
float sinf(float x) { return (float)sin(x); }
float cosf(float x) { return (float)cos(x); }
float tanf(float x) { return (float)tan(x); }
float atanf(float x) { return (float)atan(x); }
float atan2f(float y, float x) { return (float)atan2(y, x); }
float asinf(float x) { return (float)asin(x); }
float acosf(float x) { return (float)acos(x); }
float sinhf(float x) { return (float)sinh(x); }
float coshf(float x) { return (float)cosh(x); }
float tanhf(float x) { return (float)tanh(x); }
