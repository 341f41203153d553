/* __bf16 conversions: float -> bfloat16 (__truncsfbf2 on most targets) and
 * double -> bfloat16 (__truncdfbf2, the helper tinygrad users hit as undefined),
 * bfloat16 -> float (a shift, usually inline). bits[i] gets the raw bf16 values. */
#include <stdint.h>

void bf16_convert(const float *x, const double *d, float *out, uint16_t *bits, int n) {
    for (int i = 0; i < n; i++) {
        __bf16 b = (__bf16)x[i];
        __bf16 bd = (__bf16)d[i];
        __builtin_memcpy(&bits[2 * i], &b, 2);
        __builtin_memcpy(&bits[2 * i + 1], &bd, 2);
        out[i] = (float)b - (float)bd;
    }
}
