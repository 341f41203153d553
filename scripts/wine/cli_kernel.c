/* The kernel scripts/test-windows runs with `elfjit.exe run` under Wine and natively on
   Linux, comparing the answers: a read-only table, a global, a call into the C runtime's
   `expf` (in ucrtbase.dll under Windows, gigabytes from the code arena: a far call through
   the loader's stub) and a call to a function of its own. */
extern float expf(float);

static const float weights[8] = {0.5f, -1.25f, 2.0f, 0.75f, -0.5f, 1.5f, -2.0f, 0.25f};
int calls = 41;

__attribute__((noinline)) float weigh(float v, int i) { return v * weights[i & 7]; }

float kernel(float *x, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(weigh(x[i], i));
        s += x[i];
    }
    calls++;
    return s + (float)calls;
}
