/* Elementwise math an ML compiler emits for a fused pointwise op:
 * out[i] = sqrt(fma(x[i], x[i], y[i])) * 0.5 + 1, using clang builtins (no <math.h>). */
void ew_sqrt_fma(const float *x, const float *y, float *out, int n) {
    for (int i = 0; i < n; i++) {
        float t = __builtin_fmaf(x[i], x[i], y[i]);
        out[i] = __builtin_sqrtf(t) * 0.5f + 1.0f;
    }
}
