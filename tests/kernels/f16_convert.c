/* _Float16 conversions: float -> half (__truncsfhf2 unless the CPU converts
 * natively), half -> float (__extendhfsf2), double -> half (__truncdfhf2 on
 * every target: no ISA in the set converts f64 -> f16 with the right rounding
 * without it, or clang still calls the helper). bits[i] gets the raw half. */
#include <stdint.h>

void f16_convert(const float *x, const double *d, float *out, uint16_t *bits, int n) {
    for (int i = 0; i < n; i++) {
        _Float16 h = (_Float16)x[i];
        _Float16 hd = (_Float16)d[i];
        __builtin_memcpy(&bits[2 * i], &h, 2);
        __builtin_memcpy(&bits[2 * i + 1], &hd, 2);
        out[i] = (float)h + (float)hd;
    }
}
