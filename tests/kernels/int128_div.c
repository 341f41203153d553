/* 128-bit division with runtime operands: unsigned / and % (__udivti3, __umodti3)
 * and signed / and % (__divti3, __modti3). Each 128-bit value is two uint64
 * words (lo, hi) in the input arrays; out gets 8 words per element:
 * uq lo/hi, ur lo/hi, sq lo/hi, sr lo/hi. */
#include <stdint.h>

typedef unsigned __int128 u128;
typedef __int128 i128;

static u128 join(const uint64_t *w) { return ((u128)w[1] << 64) | w[0]; }

static void split(uint64_t *w, u128 v) {
    w[0] = (uint64_t)v;
    w[1] = (uint64_t)(v >> 64);
}

void int128_div(const uint64_t *num, const uint64_t *den, uint64_t *out, int n) {
    for (int i = 0; i < n; i++) {
        u128 a = join(num + 2 * i);
        u128 b = join(den + 2 * i);
        split(out + 8 * i + 0, a / b);
        split(out + 8 * i + 2, a % b);
        i128 sa = (i128)a, sb = (i128)b;
        split(out + 8 * i + 4, (u128)(sa / sb));
        split(out + 8 * i + 6, (u128)(sa % sb));
    }
}
