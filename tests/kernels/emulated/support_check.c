/* What the emulated runner's support library provides, called for real: libm in double
 * and float, half/bfloat16 conversions, 128-bit division. tests/tests/emulated.rs compares
 * the results with Rust's (glibc's libm, exact integer and rounding references). */

double exp(double), exp2(double), expm1(double), log(double), log2(double), log10(double),
    log1p(double), pow(double, double), sin(double), cos(double), tan(double), sinh(double),
    cosh(double), tanh(double), atan(double), atan2(double, double), asin(double),
    acos(double), cbrt(double), fmod(double, double), floor(double), ceil(double),
    trunc(double), round(double), rint(double), fma(double, double, double), sqrt(double),
    fabs(double);
float expf(float), exp2f(float), expm1f(float), logf(float), log2f(float), log10f(float),
    log1pf(float), powf(float, float), sinf(float), cosf(float), tanf(float), sinhf(float),
    coshf(float), tanhf(float), atanf(float), atan2f(float, float), asinf(float),
    acosf(float), cbrtf(float), fmodf(float, float), floorf(float), ceilf(float),
    truncf(float), roundf(float), rintf(float), fmaf(float, float, float), sqrtf(float),
    fabsf(float);

#define FUNCTIONS 28

/* Function k of x, in the order the Rust side lists them. */
#define APPLY(S, T)                                                                     \
    static T apply##S(int k, T x) {                                                     \
        switch (k) {                                                                    \
        case 0: return exp##S(x);                                                       \
        case 1: return exp2##S(x);                                                      \
        case 2: return expm1##S(x);                                                     \
        case 3: return log##S(x);                                                       \
        case 4: return log2##S(x);                                                      \
        case 5: return log10##S(x);                                                     \
        case 6: return log1p##S(x);                                                     \
        case 7: return pow##S(x, (T)3);                                                 \
        case 8: return pow##S(fabs##S(x), (T)0.37);                                     \
        case 9: return sin##S(x);                                                       \
        case 10: return cos##S(x);                                                      \
        case 11: return tan##S(x);                                                      \
        case 12: return sinh##S(x);                                                     \
        case 13: return cosh##S(x);                                                     \
        case 14: return tanh##S(x);                                                     \
        case 15: return atan##S(x);                                                     \
        case 16: return atan2##S(x, (T)-0.75);                                          \
        case 17: return asin##S(x);                                                     \
        case 18: return acos##S(x);                                                     \
        case 19: return cbrt##S(x);                                                     \
        case 20: return fmod##S(x, (T)0.3);                                             \
        case 21: return floor##S(x);                                                    \
        case 22: return ceil##S(x);                                                     \
        case 23: return trunc##S(x);                                                    \
        case 24: return round##S(x);                                                    \
        case 25: return rint##S(x);                                                     \
        case 26: return fma##S(x, (T)1.25, (T)-0.5);                                    \
        default: return sqrt##S(x);                                                     \
        }                                                                               \
    }
APPLY(, double)
APPLY(f, float)

void libm64(const double *x, double *out, int n) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < FUNCTIONS; k++)
            out[i * FUNCTIONS + k] = apply(k, x[i]);
}

void libm32(const float *x, float *out, int n) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < FUNCTIONS; k++)
            out[i * FUNCTIONS + k] = applyf(k, x[i]);
}

/* q[i] = a[i] / b[i] and r[i] = a[i] % b[i], unsigned then signed; 128-bit values as
 * (low, high) pairs of 64-bit words. */
void div128(const unsigned long long *a, const unsigned long long *b, unsigned long long *q,
            unsigned long long *r, int n) {
    for (int i = 0; i < n; i++) {
        unsigned __int128 x = ((unsigned __int128)a[2 * i + 1] << 64) | a[2 * i];
        unsigned __int128 y = ((unsigned __int128)b[2 * i + 1] << 64) | b[2 * i];
        unsigned __int128 uq = x / y, ur = x % y;
        __int128 sq = (__int128)x / (__int128)y, sr = (__int128)x % (__int128)y;
        q[4 * i] = (unsigned long long)uq;
        q[4 * i + 1] = (unsigned long long)(uq >> 64);
        q[4 * i + 2] = (unsigned long long)sq;
        q[4 * i + 3] = (unsigned long long)((unsigned __int128)sq >> 64);
        r[4 * i] = (unsigned long long)ur;
        r[4 * i + 1] = (unsigned long long)(ur >> 64);
        r[4 * i + 2] = (unsigned long long)sr;
        r[4 * i + 3] = (unsigned long long)((unsigned __int128)sr >> 64);
    }
}

#if defined(__FLT16_MAX__)
/* Narrowing of f32 and f64 values to binary16 and bfloat16 bits, and every binary16 bit
 * pattern widened to float. */
void halves(const float *f, const double *d, unsigned short *out, float *widened, int n) {
    /* Not vectorized: clang 19 crashes ("Cannot select ... v8bf16 = bitcast") vectorizing
     * the bfloat16 conversions for aarch64 (armv8-a). */
#pragma clang loop vectorize(disable) interleave(disable)
    for (int i = 0; i < n; i++) {
        _Float16 h = (_Float16)f[i];
        __builtin_memcpy(&out[4 * i], &h, 2);
        h = (_Float16)d[i];
        __builtin_memcpy(&out[4 * i + 1], &h, 2);
        __bf16 b = (__bf16)f[i];
        __builtin_memcpy(&out[4 * i + 2], &b, 2);
        b = (__bf16)d[i];
        __builtin_memcpy(&out[4 * i + 3], &b, 2);
    }
    for (int i = 0; i < 65536; i++) {
        unsigned short bits = (unsigned short)i;
        _Float16 h;
        __builtin_memcpy(&h, &bits, 2);
        widened[i] = (float)h;
    }
}
#endif
