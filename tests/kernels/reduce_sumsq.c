/* A reduction returning float: sum of squares, accumulated left to right
 * (no -ffast-math, so clang keeps the order and the result is reproducible). */
float reduce_sumsq(const float *x, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++)
        acc += x[i] * x[i];
    return acc;
}
