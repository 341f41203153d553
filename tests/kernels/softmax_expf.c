/* Row softmax with expf from libm, declared by hand (freestanding: no <math.h>).
 * The call to expf must be resolved at load time. */
extern float expf(float);

void softmax_expf(const float *x, float *out, int n) {
    float m = x[0];
    for (int i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        float e = expf(x[i] - m);
        out[i] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++)
        out[i] *= inv;
}
