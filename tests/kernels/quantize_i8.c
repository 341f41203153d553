/* Symmetric int8 quantisation: q = clamp(round_half_even(x / scale), -128, 127),
 * plus the dequantised value. __builtin_rintf rounds to nearest-even in the default
 * rounding mode; fminf/fmaxf builtins clamp. Returns the number of clipped values. */
#include <stdint.h>

int quantize_i8(const float *x, int8_t *q, float *deq, int n, float scale) {
    int clipped = 0;
    float inv = 1.0f / scale;
    for (int i = 0; i < n; i++) {
        float r = __builtin_rintf(x[i] * inv);
        clipped += (r > 127.0f) | (r < -128.0f);
        r = __builtin_fminf(__builtin_fmaxf(r, -128.0f), 127.0f);
        q[i] = (int8_t)r;
        deq[i] = (float)q[i] * scale;
    }
    return clipped;
}
