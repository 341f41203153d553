/* Layer normalisation over one row: mean, variance, 1/sqrt via __builtin_sqrtf,
 * then an affine transform with gamma/beta. Returns the variance. */
float layernorm(const float *x, const float *gamma, const float *beta, float *out, int n,
                float eps) {
    float mean = 0.0f;
    for (int i = 0; i < n; i++)
        mean += x[i];
    mean /= (float)n;
    float var = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = x[i] - mean;
        var += d * d;
    }
    var /= (float)n;
    float inv = 1.0f / __builtin_sqrtf(var + eps);
    for (int i = 0; i < n; i++)
        out[i] = (x[i] - mean) * inv * gamma[i] + beta[i];
    return var;
}
