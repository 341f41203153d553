/* C[M x N] = A[M x K] * B[K x N] with clang vector types (4 lanes of float),
 * row-major, N a multiple of 4. Loads/stores go through memcpy so no alignment
 * beyond float's is assumed. Scalars are splatted by vector arithmetic, never by a cast:
 * with AltiVec on (ppc64le), clang 19 follows XL rules and `(float4)(x)` sets lane 0
 * only. */
typedef float float4 __attribute__((ext_vector_type(4)));

static inline float4 load4(const float *p) {
    float4 v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

static inline void store4(float *p, float4 v) { __builtin_memcpy(p, &v, sizeof v); }

void matmul_vec4(const float *a, const float *b, float *c, int m, int k, int n) {
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j += 4) {
            float4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int p = 0; p < k; p++) {
                float4 bv = load4(b + p * n + j);
                acc += a[i * k + p] * bv;
            }
            store4(c + i * n + j, acc);
        }
    }
}
